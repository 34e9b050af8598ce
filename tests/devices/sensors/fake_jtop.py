"""The jtop fake now lives in :mod:`tests.fakes.jtop` (with the blocking ``ok()`` and both power formats)."""

from tests.fakes.jtop import JtopException, as_v40, make_module, orin_agx_power  # noqa: F401
