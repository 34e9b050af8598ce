"""Fakes of hardware for tests: realistic sysfs trees, fake tools (nvpmodel), a fake NVML."""
