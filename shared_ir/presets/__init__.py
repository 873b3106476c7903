"""Package data: the hardware presets (``hardware/<name>.yaml``), also the Hydra config group ``hardware``
(``pkg://shared_ir.presets`` on the search path of ``experiments/conf/config.yaml``)."""
