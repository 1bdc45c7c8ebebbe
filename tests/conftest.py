"""The clone's unit tests run as a harness run: the plugin registers and loads the Hypothesis profiles
(``CROSSATTN_PROFILE``, ``ci`` in nox) and checks the ``CROSSATTN_*`` variables, as for the suite."""

crossattn_sizing_harness = True
