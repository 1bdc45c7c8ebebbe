"""Base utilities every layer may use; they import only the standard library and each other.

Errors and how a value is shown (:mod:`.errors`), integer maths (:mod:`.intmath`), limits and
environment settings (:mod:`.limits`, :mod:`.settings`), JSON input and path kinds
(:mod:`.jsoninput`, :mod:`.pathkinds`), loading and calling the user's code (:mod:`.usercode`,
:mod:`.callables`), Ctrl-C and child processes (:mod:`.interrupts`, :mod:`.processes`), a
property's outcome (:mod:`.outcome`), the ``--device`` check, which must work without torch
(:mod:`.devices`), and standard output that cannot be written (:mod:`.standard_output`).
"""
