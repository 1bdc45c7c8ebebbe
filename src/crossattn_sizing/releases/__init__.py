"""Engine releases as files: fetching a release wheel or opening a source tree, checking a version.

Below both :mod:`crossattn_sizing.engine` (which installs and runs a release) and
:mod:`crossattn_sizing.audit` (which reads one), so neither imports the other to get a release.
"""
