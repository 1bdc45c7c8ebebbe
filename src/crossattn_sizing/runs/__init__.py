"""The runs layer: running the property suite and reporting it (the pytest plugin, profiles, verify's
shared run and worker, outputs, the fuzzing fleet's worker processes)."""
