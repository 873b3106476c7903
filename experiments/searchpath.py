"""The Hydra config group ``hardware`` is shared_ir's package data (``shared_ir/presets/hardware``).

``conf/config.yaml`` puts ``pkg://shared_ir.presets`` on the search path, which is enough to compose and run;
Hydra's ``--help`` lists groups before it reads that key, so the runner also registers this plugin.

``hardware=<file.yaml>`` (an absolute path, or a relative one that exists) names a hardware file instead of a
preset; :func:`register_hardware_files` makes it an option of the group."""
from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PRESETS = "pkg://shared_ir.presets"
HARDWARE_SUFFIXES = (".yaml", ".yml")


class SharedIrPresets(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="shared_ir", path=PRESETS)


def register(argv: Sequence[str] | None = None) -> None:
    """Register the presets plugin and the hardware files named in ``argv`` (default: the command line)."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(SharedIrPresets)
    register_hardware_files(sys.argv[1:] if argv is None else argv)


def is_hardware_file(option: str) -> bool:
    """Whether a ``hardware=`` option names a YAML file rather than a preset."""
    return option.endswith(HARDWARE_SUFFIXES) and (os.path.isabs(option) or os.path.isfile(option))


def register_hardware_files(argv: Sequence[str]) -> list[str]:
    """Store each hardware file named by ``hardware=<path>`` (also in a sweep list ``hardware=host,/x/hw.yaml``)
    in Hydra's ConfigStore under the name Hydra looks the option up by (``hardware/<path>``), so the override
    stays the path itself (job identity, rerun commands). The file is read by shared_ir (size limit, duplicate
    keys; a HardwareError naming it) and validated by the task like a preset. Returns the paths stored."""
    from hydra.core.config_store import ConfigStore

    from shared_ir.hardware import HardwareError, read_hardware_file

    stored = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key.lstrip("+") != "hardware":
            continue
        for option in value.split(","):
            if not is_hardware_file(option):
                continue
            data = read_hardware_file(option)
            if not isinstance(data, Mapping):
                raise HardwareError(option, f": a hardware description must be a mapping, got {type(data).__name__}")
            group, _, name = f"hardware/{option}".rpartition("/")
            group = "/".join(p for p in group.split("/") if p)  # Hydra's lookup skips empty parts ('hardware//abs')
            ConfigStore.instance().store(name=name, node=dict(data), group=group, provider="experiments.searchpath")
            stored.append(option)
    return stored
