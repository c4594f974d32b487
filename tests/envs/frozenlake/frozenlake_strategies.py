"""Hypothesis strategies shared by the FrozenLake tests: small maps and slip settings."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def lake_maps(draw: st.DrawFn, max_side: int = 5) -> tuple[str, ...]:
    """A rectangular map of S/F/H/G tiles with at least one S (any layout Gymnasium accepts)."""
    nrow = draw(st.integers(1, max_side))
    ncol = draw(st.integers(2, max_side))  # Gymnasium cannot load one-column maps
    tiles = draw(st.lists(st.sampled_from("SFFFHG"), min_size=nrow * ncol, max_size=nrow * ncol))
    start = draw(st.integers(0, nrow * ncol - 1))
    tiles[start] = "S"
    return tuple("".join(tiles[r * ncol : (r + 1) * ncol]) for r in range(nrow))


# Exact extremes (0 and 1) plus ordinary rates; rates within 1e-6 of 0 or 1 give slip
# probabilities that float linear algebra cannot tell from 0 (the oracle then approximates).
success_rates = st.one_of(
    st.sampled_from([1.0 / 3.0, 0.8, 0.0, 1.0, 0.5, 0.3]), st.floats(1e-6, 1.0 - 1e-6)
)

# Any rate at all, for tests of the dynamics alone (no infinite-horizon oracle involved).
any_success_rates = st.one_of(
    st.sampled_from([1.0 / 3.0, 0.8, 0.0, 1.0, 0.3]), st.floats(0.0, 1.0, allow_nan=False)
)
