"""Branch merging: both paths of an ``if`` the config cannot decide, and what they leave behind.

Every write under an undecided condition is journalled so the path can be
undone; after both paths ran, what they left equal is kept and what they left
different becomes an :class:`~crossattn_sizing.audit.values.Unknown` naming the
condition and its line. Loops and handlers the evaluator cannot run poison
what they could assign, with the reason.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from crossattn_sizing.audit.interp.state import (
    MISSING,
    BreakSignal,
    ContinueSignal,
    Frame,
    RaiseSignal,
    ReturnSignal,
    same,
    undecided_because,
)
from crossattn_sizing.audit.interp.syntax import LIST_METHODS, source_text, walk_no_defs
from crossattn_sizing.audit.values import TList, Unknown


def capture(entries: list[tuple[Any, ...]]) -> dict[Any, Any]:
    """The final value of everything a branch wrote: key -> ((kind, container, name), value)."""
    out: dict[Any, Any] = {}
    for kind, container, name, _old in entries:
        key = (id(container), name)
        out[key] = ((kind, container, name), current(kind, container, name))
    return out


def current(kind: str, container: Any, name: Any) -> Any:
    """What a journal entry's container holds now: the dict value, or the list with its poison."""
    if kind == "dict":
        return container.get(name, MISSING)
    return (list(container), container.poison)


def undo(entries: list[tuple[Any, ...]]) -> None:
    """Put back what ``entries`` overwrote, latest first, so the next branch starts from the same state."""
    for kind, container, name, old in reversed(entries):
        if kind == "dict":
            if old is MISSING:
                container.pop(name, None)
            else:
                container[name] = old
        else:
            container[:] = old[0]
            container.poison = old[1]


class Branches:
    """Runs undecidable branches and merges them; relies on the other parts of :class:`Interpreter`."""

    if TYPE_CHECKING:  # the other parts' methods and Interpreter's state, reached through ``self``

        follow: bool

        def __getattr__(self, name: str) -> Any: ...

    def _exec_if(self, stmt: ast.If, frame: Frame) -> None:
        test = self.eval(stmt.test, frame)
        truth = self._truth(test)
        if truth is True:
            self.exec_block(stmt.body, frame)
        elif truth is False:
            self.exec_block(stmt.orelse, frame)
        else:
            self._branch(source_text(stmt.test), stmt.body, stmt.orelse, frame, stmt, undecided_because(test))

    def _branch(self, text: str, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame,
                stmt: ast.stmt, cause: str = "") -> None:  # fmt: skip
        """Both paths of an undecidable ``if``; what they leave different becomes unknown."""
        outcomes = []
        for label, block in ((text, body), (f"not ({text})", orelse)):
            self._journals.append([])
            self._conditions.append(label)
            kind, value = "fall", None
            try:
                self.exec_block(block, frame)
            except ReturnSignal as ret:
                kind, value = "return", ret.value
            except RaiseSignal:
                kind = "raise"
            except (BreakSignal, ContinueSignal):
                kind = "jump"
            finally:
                self._conditions.pop()
                entries = self._journals.pop()
            outcomes.append((kind, value, capture(entries)))
            undo(entries)
        live = [o for o in outcomes if o[0] in ("fall", "return", "jump")]
        if not live:
            raise RaiseSignal(self._where(frame, stmt))
        reason = Unknown(f"depends on `{text}` ({self._where(frame, stmt)}){cause}")
        if any(o[0] == "jump" for o in outcomes):
            frame.loop_taint = reason
        for kind, value, _ in live:
            if kind == "return" and len(live) > 1:
                frame.pending_returns.append(value)
        self._merge([o[2] for o in live], reason, frame, drop_locals_of=[o[0] != "fall" for o in live])
        if all(o[0] == "return" for o in live):
            raise ReturnSignal(frame.pending_returns.pop() if frame.pending_returns else live[0][1])

    def _merge(self, captures: list[dict[Any, Any]], reason: Unknown, frame: Frame,
               drop_locals_of: list[bool]) -> None:  # fmt: skip
        keys: dict[Any, Any] = {}
        for cap in captures:
            keys.update({k: v[0] for k, v in cap.items()})
        for key, (kind, container, name) in keys.items():
            values = []
            for cap, dropped in zip(captures, drop_locals_of, strict=False):
                if dropped and container is frame.locals:
                    continue
                if key in cap:
                    values.append(cap[key][1])
                else:
                    values.append(current(kind, container, name))
            if not values:
                continue
            if kind == "dict":
                merged = values[0] if all(same(values[0], v) for v in values[1:]) else reason
                if merged is MISSING:
                    continue
                self._write(container, name, merged)
            else:
                first = values[0]
                if all(same(first, v) for v in values[1:]):
                    self._touch(container)
                    container[:] = first[0]
                    container.poison = first[1]
                else:
                    self._touch(container)
                    container.poison = reason

    def _write(self, container: dict[str, Any], key: str, value: Any) -> None:
        if self._journals:
            self._journals[-1].append(("dict", container, key, container.get(key, MISSING)))
        container[key] = value

    def _touch(self, lst: TList) -> None:
        if self._journals:
            self._journals[-1].append(("list", lst, None, (list(lst), lst.poison)))

    def _poison_targets(self, body: list[ast.stmt], frame: Frame, why: Unknown) -> None:
        """Everything ``body`` could assign or append to becomes ``why``."""
        for stmt in body:
            for node in walk_no_defs(stmt):
                if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
                    node.ctx, ast.Store
                ):
                    self._assign(node, why, frame)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LIST_METHODS
                ):
                    target = self._quiet_eval(node.func.value, frame)
                    if isinstance(target, TList):
                        self._touch(target)
                        target.poison = why

    def _quiet_eval(self, node: ast.expr, frame: Frame) -> Any:
        saved, self.follow = self.follow, False
        try:
            return self.eval(node, frame)
        finally:
            self.follow = saved

