"""Attribute lookup: ``obj.name`` for engine objects, specs, instances, modules and ``super()``."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from crossattn_sizing.audit.interp.state import KnownFnVal, ListMethod
from crossattn_sizing.audit.interp.syntax import LIST_METHODS, decorator_name
from crossattn_sizing.audit.known import (
    CONFIG_ATTRS,
    KIND_SPEC_CLASS,
    KNOWN_QUALIFIED,
    SPEC_DATA_ATTRS,
    SPEC_MODULE,
    DcpGroup,
    NotEvaluable,
    spec_attr,
)
from crossattn_sizing.audit.modules import ModRef, class_constants, is_enum
from crossattn_sizing.audit.values import (
    BoundMethod,
    ClassRef,
    EnumMember,
    ExternalName,
    FuncRef,
    GroupVal,
    Instance,
    SpecVal,
    SuperVal,
    Sym,
    TList,
    Unknown,
)


class Attributes:
    """Looks up attributes; relies on the other parts of :class:`Interpreter`."""

    if TYPE_CHECKING:  # the other parts' methods and Interpreter's state, reached through ``self``

        def __getattr__(self, name: str) -> Any: ...

    def attribute(self, obj: Any, name: str) -> Any:
        """``obj.name`` under the audit's rules (also used by the ``getattr`` known function)."""
        if isinstance(obj, Unknown):
            return obj
        if isinstance(obj, ExternalName):
            obj = Sym(f"{obj.module}.{obj.name}" if obj.name else obj.module)
        if isinstance(obj, Sym):
            qualified = f"{obj.path}.{name}"
            if qualified in KNOWN_QUALIFIED:
                return KnownFnVal(qualified, KNOWN_QUALIFIED[qualified])
            if name in CONFIG_ATTRS:
                return CONFIG_ATTRS[name](self.config)
            return Sym(qualified)
        if isinstance(obj, ModRef):
            module = self.index.module(obj.name)
            if module is not None:
                return self._global(module, name)
            return Unknown(f"module {obj.name} not in the tree")
        if isinstance(obj, GroupVal):
            if name == "kv_cache_spec":
                return SpecVal(obj.group)
            return Unknown(f"kv_cache_group.{name} has no counterpart in the harness config")
        if isinstance(obj, SpecVal):
            return self._spec_attribute(obj, name)
        if isinstance(obj, SuperVal):
            return self._super_attribute(obj, name)
        if isinstance(obj, Instance):
            return self._instance_attribute(obj, name)
        if isinstance(obj, ClassRef):
            return self._class_attribute(obj, name)
        if isinstance(obj, DcpGroup):
            return getattr(obj, name, Unknown(f"get_dcp_group().{name}"))
        if isinstance(obj, TList) and name in (*LIST_METHODS, "copy", "index", "count"):
            return ListMethod(obj, name)
        return Unknown(f"attribute {name} of {type(obj).__name__}")

    def _bound(self, obj: Any, method: FuncRef) -> Any:
        """``obj.method``: a bound method, or the value of a property."""
        decorators = {decorator_name(d) for d in method.node.decorator_list}
        if decorators & {"property", "cached_property"}:
            return self._invoke(method, [], {}, obj, statement=False)
        return BoundMethod(obj, method)

    def _class_attribute(self, cls: ClassRef, name: str) -> Any:
        """``Cls.NAME``: a member of an enum of the tree, or a method (e.g. a classmethod) by reference."""
        if is_enum(cls) and name in class_constants(cls):
            return EnumMember(cls.name, name)
        method = self.index.find_method(cls, name)
        if method is not None:
            return method
        return Unknown(f"class attribute {cls.name}.{name} ({self.index.module_of(cls).path}) is not read")

    def _spec_class(self, spec: SpecVal) -> ClassRef:
        """The release's class the group's kind stands for; NotEvaluable when the release lacks it."""
        name = KIND_SPEC_CLASS[spec.group.kind]
        module = self.index.module(SPEC_MODULE)
        cls = self.index.resolve(module, name) if module is not None else None
        if not isinstance(cls, ClassRef):
            raise NotEvaluable(
                f"the release defines no {name} in {SPEC_MODULE}, the class a {spec.group.kind.value} "
                "group stands for"
            )
        return cls

    def spec_isinstance(self, spec: SpecVal, cls: Any) -> bool:
        """``isinstance(spec, cls)``: whether ``cls`` is the group's spec class or one of its bases.

        Read from the release's own class tree, so any spec class it defines
        is answered; a group is an instance of exactly its kind's class.
        """
        if isinstance(cls, Unknown):
            raise NotEvaluable(cls.reason)
        if not isinstance(cls, ClassRef):
            shown = f"{cls.module}.{cls.name}" if isinstance(cls, ExternalName) else type(cls).__name__
            raise NotEvaluable(f"isinstance(spec, {shown}): not a class of the tree")
        ancestors, unresolved = self.index.ancestors(self._spec_class(spec))
        if cls in ancestors:
            return True
        if unresolved:
            raise NotEvaluable(
                f"isinstance(spec, {cls.name}): the bases {', '.join(unresolved)} of "
                f"{KIND_SPEC_CLASS[spec.group.kind]} are not in the tree"
            )
        return False

    def _spec_attribute(self, spec: SpecVal, name: str) -> Any:
        if name in SPEC_DATA_ATTRS:
            return spec_attr(self.config, spec, name)
        try:
            cls: ClassRef | None = self._spec_class(spec)
        except NotEvaluable:
            cls = None
        method = self.index.find_method(cls, name) if cls is not None else None
        if method is None:
            return spec_attr(self.config, spec, name)
        return self._bound(spec, method)

    def _super_attribute(self, sup: SuperVal, name: str) -> Any:
        module = self.index.module_of(sup.owner)
        for base in sup.owner.node.bases:
            base_ref = self.index.resolve(module, base.id) if isinstance(base, ast.Name) else None
            method = self.index.find_method(base_ref, name) if isinstance(base_ref, ClassRef) else None
            if method is not None:
                return self._bound(sup.instance, method)
        return Unknown(f"super().{name} of {sup.owner.name} is not in the tree")

    def _instance_attribute(self, obj: Instance, name: str) -> Any:
        if name in obj.attrs:
            return obj.attrs[name]
        method = self.index.find_method(obj.cls, name)
        if method is not None:
            return self._bound(obj, method)
        if obj.config_fallback:
            if name in CONFIG_ATTRS:
                return CONFIG_ATTRS[name](self.config)
            return Sym(f"self.{name}")
        return Unknown(f"{obj.cls.name}.{name} is not set where the audit can see it")

