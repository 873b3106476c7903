"""The Hydra config group ``hardware`` is shared_ir's package data (``shared_ir/presets/hardware``).

``conf/config.yaml`` puts ``pkg://shared_ir.presets`` on the search path, which is enough to compose and run;
Hydra's ``--help`` lists groups before it reads that key, so the runner also registers this plugin."""
from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PRESETS = "pkg://shared_ir.presets"


class SharedIrPresets(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="shared_ir", path=PRESETS)


def register() -> None:
    from hydra.core.plugins import Plugins

    Plugins.instance().register(SharedIrPresets)
