"""The shared hypothesis settings of the property tests.

Use: ``from tests.helpers.property_settings import PROPERTY``; ``@PROPERTY`` above ``@given(...)``.
Modest example counts keep each test to seconds on 2 cores; no deadline (the machine is shared,
timings vary); no example database, so a run writes nothing into the checkout (a failure
prints its example and the seed to reproduce it).
"""

from hypothesis import HealthCheck, settings

PROPERTY = settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
