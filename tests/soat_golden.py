"""SOAT's own golden set lives in shared/, beside the repo, not in it: tests that read it skip where it is absent."""

from pathlib import Path

import pytest

SOAT_GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "soat-golden" / "golden.v1.json"
SOAT_GOLDEN_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "soat-golden.yaml"
needs_soat_golden = pytest.mark.skipif(
    not SOAT_GOLDEN.exists(), reason=f"SOAT's golden set is not here ({SOAT_GOLDEN}); it lives in shared/, not in this repo")
