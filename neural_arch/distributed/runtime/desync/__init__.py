"""Name the ranks that entered different collectives, seconds after it happened, with both call sites.

Used automatically: ``init_process_group`` turns on torch's flight recorder (``TORCH_FR_BUFFER_SIZE``,
unless the job set it or ``TORCH_NCCL_TRACE_BUFFER_SIZE`` itself; ``0`` turns this check off) and
the heartbeat starts a ``Checker`` thread on every rank. Nothing to call. What a desync looks like
(rank 1 skipped the all_reduce of line 9, so its line-10 call met rank 0's line-9 call)::

    neural_arch: collective desync in the default process group: rank 1 skipped all_reduce((4,)
    float32) at skip.py:9 (rank 0's collective #1); rank 1's #1 is all_reduce((4,) float32) at
    skip.py:10, rank 0's #2. Latest collectives: rank 0 at #3, rank 1 at #3 (in
    destroy_process_group). Named 2.1 s after the ranks' collectives #3 diverged, of the 300 s the
    process group would wait. Flight-recorder dumps: /tmp/neural_arch-fr-... (read them with:
    python -m torch.distributed.flight_recorder.fr_trace DIR)

How. Torch's flight recorder notes every collective the process enters: the script's own and those
DDP's reducer and FSDP issue (process group, sequence number, op, shapes, dtypes, Python stack).
Each beat, a rank that entered a collective since the last one publishes the fingerprints (op,
shapes, dtypes) of its newest entries to the job's store: the heartbeat's channel, never the
process group, which is what may be stuck. Rank 0 compares the ranks' entries of equal sequence
number. At the first difference every rank writes its flight-recorder dump (the format torch's
analyzer reads) and publishes the call sites of its entries; rank 0 finds where the sequences
parted (a skipped or an extra collective shifts one rank's sequence against the others') and
stores the one-line verdict; every rank prints it (rank 0 and the named ranks) and raises
``CollectiveDesync`` in its main thread. A main thread stuck inside the collective (gloo waits in
C++, where no Python exception reaches it) is not waited for: after ``GRACE`` seconds the rank
exits with status 1, which unblocks its peers.

What it cannot see. A rank that skipped a collective and then enters none (it computes, or waits
on something else) looks like a slow rank: the timeout names it, as before
(``heartbeat.describe_stragglers``). When the mismatch makes gloo receive more bytes than it posted,
gloo kills that rank at once (``op.preamble.length <= op.nbytes ... Is there a distributed
collective mismatch in your code?``), before any beat: gloo's message is then the only one. Send
and recv are not compared; scatter and all_to_all, whose inputs may differ across ranks, by op only.

Cost (CPU build, gloo; docs/monitoring.md has the runs): recording adds about 6 us to each
collective (the Python stack capture); the checker thread spends 3-8 ms of one core per second (a
beat after new collectives: a 256-entry dump, 64 fingerprints, ~5 KB to the store; a beat without
new collectives: one store round trip); rank 0's comparison 0.3 ms for 2 ranks, 22 ms for 64
(skipped when no record changed). A larger ``TORCH_FR_BUFFER_SIZE`` makes beats rarer, not dearer
(see ``Checker._publish``). ``TORCH_FR_BUFFER_SIZE=0`` in the job's environment turns it off.

Files, one concern each: ``recorder.py`` (reading torch's flight recorder), ``fingerprints.py``
(what must agree, and the call site), ``compare.py`` (finding the first difference and wording the
verdict), ``records.py`` (what the ranks exchange through the store), ``dump.py`` (the analyzer's
dump files) and ``checker.py`` (the thread).
"""

from neural_arch.distributed.runtime.desync.checker import Checker, CollectiveDesync, read_verdict, verdict
from neural_arch.distributed.runtime.desync.compare import Mismatch, explain, find_mismatch
from neural_arch.distributed.runtime.desync.fingerprints import Entry, call_site
from neural_arch.distributed.runtime.desync.recorder import (
    Since,
    enable_flight_recorder,
    last_record_ids,
    recorder_enabled,
)

__all__ = [
    "Checker",
    "CollectiveDesync",
    "Entry",
    "Mismatch",
    "Since",
    "call_site",
    "enable_flight_recorder",
    "explain",
    "find_mismatch",
    "last_record_ids",
    "read_verdict",
    "recorder_enabled",
    "verdict",
]
