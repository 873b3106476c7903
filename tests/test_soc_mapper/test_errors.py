import pytest
from soc_mapper.config import GAConfig, MagmaConfig, RunConfig
from soc_mapper.errors import MapperError, SoCError
from soc_mapper.soc import soc_from_system

from .helpers import device, soc_dict


def test_soc_without_links_names_the_devices():
    d = soc_dict([device("nv", "nvdla", None), device("tpu", "tpu", None)], topology=False)
    with pytest.raises(SoCError, match="no link or mesh topology between 'nv' and 'tpu'"):
        soc_from_system(d)


def test_mesh_position_clash_names_both_devices():
    d = soc_dict([device("nv", "nvdla", (0, 0)), device("tpu", "tpu", (0, 0))])
    with pytest.raises(SoCError, match=r"mesh_position.*'tpu'.*'nv'.*\[0, 0\]"):
        soc_from_system(d)


def test_soc_without_devices_and_bad_bandwidth():
    with pytest.raises(SoCError):
        soc_from_system({"name": "empty", "devices": []})
    with pytest.raises(SoCError, match="nn_bandwidth"):
        soc_from_system(soc_dict([device("nv", "nvdla", (0, 0))]), nn_bandwidth=-1)


def test_presets_load_with_bandwidth_override():
    s = soc_from_system("soc_small", 0.8e9)
    assert s.n == 4 and s.nn_bandwidth == 0.8e9
    i, j = s.index("nvdla0"), s.index("tpu0")
    assert s.bandwidth[i, j] == pytest.approx(0.4e9)  # two hops
    assert s.bandwidth[i, i] == pytest.approx(32e9)
    assert soc_from_system("soc_large").n == 8


def test_configs_name_the_bad_field():
    with pytest.raises(MapperError, match=r"ga\.mutation_rate"):
        GAConfig(mutation_rate=1.5)
    with pytest.raises(MapperError, match=r"ga\.executor"):
        GAConfig(executor="mpi")
    with pytest.raises(MapperError, match=r"magma\.elite_ratio"):
        MagmaConfig(elite_ratio=-0.1)
    with pytest.raises(MapperError, match=r"run\.algorithms\[1\]"):
        RunConfig(algorithms=["comb", "nope"])
    with pytest.raises(MapperError, match=r"ga\.population"):
        RunConfig(ga={"population": 1})
