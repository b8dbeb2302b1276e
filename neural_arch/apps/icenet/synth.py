"""Synthetic IceNet-style sea-ice data: the physics (store_writer.py writes it to a zarr store).

Try it: ``python -c "from neural_arch.apps.icenet.data import IceNetSpec, create_dataset;
print(create_dataset('/tmp/icenet.zarr', IceNetSpec()))"`` (a few seconds; read it back with
``neural_arch.apps.icenet.data.IceNetData`` or ``xarray.open_zarr``).

The package ships no real IceNet data and needs no download: it generates monthly fields
with the same structure and real, learnable predictability on a square polar grid:

* ``siconca`` (sea-ice concentration, 0..1): ice fills the ocean inside an ice-edge radius
  that grows to its maximum in March and shrinks to its minimum in September, declines over
  the years (faster in summer), and is shifted by interannual edge anomalies;
* ``tas_anom`` / ``tos_anom`` (K): air / ocean temperature anomalies whose smooth patterns
  *lead* the edge anomaly by 1-2 months (warm now -> less ice next months), so they carry
  information beyond persistence of the ice itself.

The anomalies come from a few low-dimensional AR(1) processes (one amplitude per smooth
angular mode). They persist from month to month, so a month cannot be computed on its own;
but the processes are tiny, so every rank generates all of them from the seed (bit-identical
everywhere) and renders full fields only for its own months. A month's small-scale noise
comes from a generator seeded by ``(seed, month)``. Hence the store's bytes do not depend on
how many ranks wrote it. ``init_store`` (rank 0) creates metadata, coordinates, the land mask
and the train-years climatology; ``write_months`` (every rank) fills month i on rank
``i % world_size``; the caller barriers in between (this module runs no collectives).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SOURCE = "neural_arch synthetic IceNet-style data"
VARIABLES = {  # name -> (units, long_name)
    "siconca": ("1", "sea-ice concentration (fraction of cell area)"),
    "tas_anom": ("K", "near-surface air temperature anomaly"),
    "tos_anom": ("K", "sea surface (ocean) temperature anomaly"),
}

# Ice edge, in units of the half-width of the grid (the centre-to-edge-midpoint distance).
EDGE_MEAN, EDGE_SEASON = 0.66, 0.2  # March edge ~0.86, September edge ~0.46 at the start
EDGE_WIDTH = 0.2  # width of the marginal ice zone (concentration ramps from 0 to 1)
TREND_WINTER, TREND_SUMMER_EXTRA = 0.003, 0.005  # edge retreat per year; summer retreats faster
EDGE_ANOM = 0.06  # edge shift per unit of one mode's anomaly amplitude
# AR(1) driving processes, per angular mode (monthly steps). Tuned so that the edge anomaly
# has lag-1 autocorrelation ~0.84 and air/ocean anomalies explain much of what persistence
# cannot (R^2 of the edge anomaly 2 months ahead: 0.47 from itself, 0.67 with tas/tos).
OCEAN_PHI, AIR_PHI = 0.9, 0.5  # ocean anomalies are slow, air anomalies fast
ICE_PHI, ICE_FROM_AIR, ICE_FROM_OCEAN, ICE_NOISE = 0.6, 0.35, 0.35, 0.5
TAS_AMP, TAS_TREND, TAS_NOISE = 2.0, 0.05, 0.4  # K per unit amplitude, K per year, K
TOS_AMP, TOS_NOISE = 0.8, 0.1  # K per unit amplitude, K
BURN_IN = 36  # months run before the first stored month, so the processes start stationary
WRITE_BLOCK = 64  # months rendered and written per zarr call (one call per month is ~10x slower)


@dataclass(frozen=True)
class IceNetSpec:
    """Size and splits of the synthetic IceNet-style dataset (stored in the store's attrs)."""

    grid: int = 48
    """Cells per side of the square polar grid."""
    cell_km: float = 50.0
    """Cell size in km; a cell's area is ``cell_km**2`` km^2."""
    years: int = 25
    """Monthly data from January of ``start_year`` to December of the last year."""
    start_year: int = 1995
    """Calendar year of the first month."""
    seed: int = 0
    """Seed of everything random: land mask, driving processes, noise."""
    lags: int = 3
    """Past months of sea-ice concentration given as input (t, t-1, ..., t-lags+1)."""
    leads: int = 3
    """Months forecast: t+1 .. t+leads."""
    val_years: int = 5
    """The last ``val_years`` years (by forecast init month) are the validation split."""

    def __post_init__(self) -> None:
        for name in ("grid", "years", "lags", "leads"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"IceNetSpec.{name}={getattr(self, name)!r} must be >= 1.")
        if not 0 <= self.val_years < self.years:
            raise ValueError(f"IceNetSpec.val_years={self.val_years} must be in [0, years={self.years}).")
        if self.cell_km <= 0:
            raise ValueError(f"IceNetSpec.cell_km={self.cell_km} must be > 0.")

    @property
    def months(self) -> int:
        """Number of stored months, T."""
        return 12 * self.years


def month_starts(spec: IceNetSpec) -> np.ndarray:
    """datetime64[ns] start of every stored month."""
    first = np.datetime64(f"{spec.start_year:04d}-01", "M")
    return (first + np.arange(spec.months)).astype("datetime64[ns]")


def coords_km(spec: IceNetSpec) -> np.ndarray:
    """Cell-centre coordinate along one axis, km, 0 at the pole (the grid centre)."""
    return ((np.arange(spec.grid) - (spec.grid - 1) / 2) * spec.cell_km).astype(np.float32)


def _polar(spec: IceNetSpec) -> tuple[np.ndarray, np.ndarray]:
    """(r, theta) of every cell; r is 1 at the middle of the grid's sides, sqrt(2) at corners."""
    c = coords_km(spec).astype(np.float64) / (spec.grid / 2 * spec.cell_km)
    y, x = np.meshgrid(c, c, indexing="ij")
    return np.hypot(x, y), np.arctan2(y, x)


def make_land_mask(spec: IceNetSpec) -> np.ndarray:
    """bool [grid, grid]: land at the corners, a continent near the pole and a few islands."""
    r, theta = _polar(spec)
    c = coords_km(spec).astype(np.float64) / (spec.grid / 2 * spec.cell_km)
    y, x = np.meshgrid(c, c, indexing="ij")
    rng = np.random.default_rng([spec.seed, 0])
    land = r > 1.1 + 0.05 * np.cos(3 * theta + rng.uniform(0, 2 * np.pi))  # coasts of the rim
    off, angle, tilt = rng.uniform(0.05, 0.15), rng.uniform(0, 2 * np.pi), rng.uniform(0, np.pi)
    cx, cy = off * np.cos(angle), off * np.sin(angle)
    a, b = rng.uniform(0.14, 0.2), rng.uniform(0.08, 0.12)  # continent semi-axes
    u = (x - cx) * np.cos(tilt) + (y - cy) * np.sin(tilt)
    v = -(x - cx) * np.sin(tilt) + (y - cy) * np.cos(tilt)
    land |= (u / a) ** 2 + (v / b) ** 2 <= 1.0
    for _ in range(3):  # islands in the seasonal ice zone
        ir, ia, size = rng.uniform(0.35, 0.75), rng.uniform(0, 2 * np.pi), rng.uniform(0.05, 0.09)
        land |= np.hypot(x - ir * np.cos(ia), y - ir * np.sin(ia)) <= size
    return land


@dataclass(frozen=True)
class Drivers:
    """The low-dimensional processes behind all anomalies: one amplitude per month and mode."""

    ice: np.ndarray  # [T, K] ice-edge anomaly (positive: more ice)
    air: np.ndarray  # [T, K] air temperature anomaly (warm air melts ice next month)
    ocean: np.ndarray  # [T, K] ocean temperature anomaly (slow, so it predicts further ahead)
    modes: np.ndarray  # [K, grid, grid] smooth angular patterns the amplitudes multiply
    edge_shape: np.ndarray  # [grid, grid] fixed geographic asymmetry of the ice edge


def make_drivers(spec: IceNetSpec) -> Drivers:
    """Generate the driving processes from the seed; identical on every rank (float64)."""
    _, theta = _polar(spec)
    rng = np.random.default_rng([spec.seed, 1])
    phase = rng.uniform(0, 2 * np.pi, size=3)
    modes = np.stack(
        [
            np.full_like(theta, 0.7),  # basin-wide
            np.cos(theta + phase[0]),
            np.sin(theta + phase[0]),  # one side vs the other
            np.cos(2 * theta + phase[1]),
            np.sin(2 * theta + phase[1]),
        ]
    )
    edge_shape = 0.06 * np.cos(theta + phase[2]) + 0.03 * np.cos(2 * theta - phase[2])
    steps, k = BURN_IN + spec.months, len(modes)
    eps = rng.standard_normal((steps, 3, k))
    ice, air, ocean = np.zeros((steps, k)), np.zeros((steps, k)), np.zeros((steps, k))
    for n in range(1, steps):  # explicit loop: the same float64 operations on every rank
        ocean[n] = OCEAN_PHI * ocean[n - 1] + np.sqrt(1 - OCEAN_PHI**2) * eps[n, 0]
        air[n] = AIR_PHI * air[n - 1] + np.sqrt(1 - AIR_PHI**2) * eps[n, 1]
        ice[n] = (
            ICE_PHI * ice[n - 1] - ICE_FROM_AIR * air[n - 1] - ICE_FROM_OCEAN * ocean[n - 1] + ICE_NOISE * eps[n, 2]
        )
    keep = slice(BURN_IN, None)
    return Drivers(ice[keep], air[keep], ocean[keep], modes, edge_shape)


def render_month(spec: IceNetSpec, drivers: Drivers, land: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """float32 [grid, grid] fields of month index ``n``; depends only on (spec, n)."""
    r, _ = _polar(spec)
    season = np.cos(2 * np.pi * (n % 12 - 2) / 12)  # +1 in March (max ice), -1 in September
    summer = (1 - season) / 2
    years = n / 12
    anomaly = np.tensordot(drivers.ice[n], drivers.modes, axes=1)
    edge = (
        EDGE_MEAN
        + EDGE_SEASON * season
        - (TREND_WINTER + TREND_SUMMER_EXTRA * summer) * years
        + drivers.edge_shape
        + EDGE_ANOM * (0.7 + 0.6 * summer) * anomaly
    )  # thin summer ice reacts more
    ramp = np.clip(0.5 + (edge - r) / EDGE_WIDTH, 0.0, 1.0)
    noise = np.random.default_rng([spec.seed, 2, n]).standard_normal((3,) + r.shape)
    # Noise only where there is ice, strongest in the marginal zone: open water stays exactly 0.
    sic = ramp * 0.98 + (ramp > 0) * (0.01 + 0.25 * ramp * (1 - ramp)) * noise[0]
    sic = np.where(land, 0.0, np.clip(sic, 0.0, 1.0))
    tas = TAS_AMP * np.tensordot(drivers.air[n], drivers.modes, axes=1) + TAS_TREND * years + TAS_NOISE * noise[1]
    tos = TOS_AMP * np.tensordot(drivers.ocean[n], drivers.modes, axes=1) + TOS_NOISE * noise[2]
    tos = np.where(land, 0.0, tos)  # no ocean on land
    return {"siconca": sic.astype(np.float32), "tas_anom": tas.astype(np.float32), "tos_anom": tos.astype(np.float32)}


def train_months(spec: IceNetSpec, val_years: int) -> np.ndarray:
    """Time indices of the months in the training years (all but the last ``val_years``)."""
    return np.arange(12 * (spec.years - val_years))
