"""``prove --symbolic``: coverage proved for every config, not a bounded domain, by an SMT solver (z3).

The config's integers become solver terms; a policy's widths become terms over
them; the solver is asked for a config and an admitted encoder length whose
row falls short. "unsat" is a proof for all integers under the config rules;
"sat" is a model, which is replayed through ``check`` on the concrete code
before it is shown as a failure. Modules, each named for what it holds:

* :mod:`.terms`: the symbolic config (its terms, the config rules and the admission bound);
* :mod:`.encoding`: integer operations (floor and ceil division, max, min) as solver terms;
* :mod:`.obligation`: the coverage obligation and the solver call (a proof, a model, or why neither);
* :mod:`.builtin`: the built-in policies' widths as terms, from their length and alignment rules;
* :mod:`.engine`: a release's own sizing code evaluated with terms (paths split per condition);
* :mod:`.replay`: a model as a concrete config, judged by ``check``'s code;
* :mod:`.run`: one policy proved, every shape, as a :class:`~.run.SymbolicResult`.

z3 is an optional dependency (the ``prove`` extra): :func:`.terms.z3_module`
raises one line when it is missing.
"""
