import pytest


@pytest.fixture(autouse=True)
def _private_kernel_cache(tmp_path_factory, monkeypatch):
    # every test session gets its own kernel cache: tests never see kernels built by earlier runs
    d = tmp_path_factory.getbasetemp() / "chain_fuser_cache"
    d.mkdir(exist_ok=True)
    monkeypatch.setenv("CHAIN_FUSER_CACHE", str(d))
