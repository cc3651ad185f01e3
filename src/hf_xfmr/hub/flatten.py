"""Flat, self-contained Python files generated from the classes of a package (for Hub remote code).

transformers loads a Hub model's code from the repository itself (`trust_remote_code=True`) and only
copes with a flat folder: `save_pretrained` copies the files reached by same-directory relative
imports, while `from ..pkg import x` and `from . import x` fail at load. Our models are spread over
`layers/`, `models/*.py` and `models/<arch>/`, so export generates flat files from the sources.

How (all static, from the source text; nothing is executed):
1. parse the modules holding the root classes and follow their imports inside the package
   (relative or absolute, through package `__init__` re-exports and `import *`), transitively;
2. keep only the top-level statements that are needed: those defining a name a kept statement uses
   (scope-aware: a function's own locals never pull anything in), plus statements that mutate a kept
   name (`KERNELS["x"] = f`); docstrings, `__all__`, registration calls and `TYPE_CHECKING` blocks go;
3. emit them module by module in dependency order with their original text (comments included),
   with the external imports (stdlib, torch, transformers, ...) merged at the top.

Names are kept as written. A name imported under an alias (`from .dropout import dropout as
apply_dropout`) gets an alias line after its definition; two different definitions with one name
(or a definition shadowing a builtin that another module uses) are told apart by renaming one of
them and its references, with the scope rules of Python, so locals are never touched.

A `Unit` is one output file. Several units can be generated together (`flatten_units`): a later
unit imports, from an earlier one, what that one already defines (`from .configuration_x import
XConfig`), so a config class exists once and keeps its identity.

What model code must respect to stay flattenable, what is refused, and the tests that check every
architecture's generated code loads without hf_xfmr and matches: docs/flatten.md (the one place).
"""

import ast
import builtins
import importlib.util
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

BUILTIN_NAMES = frozenset(dir(builtins))
_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
                ast.DictComp, ast.GeneratorExp)


class FlattenError(Exception):
    """The sources use a construct that cannot be turned into flat code; the message names it."""


# ------------------------------------------------------------------------------------------------
# Scope analysis
# ------------------------------------------------------------------------------------------------

def _target_names(target) -> set[str]:
    """Names bound by an assignment target (`a`, `a, (b, *c)`); subscripts/attributes bind none."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def _bound_names(body) -> set[str]:
    """Names a block binds in its own scope (nested functions, classes, lambdas and comprehensions
    count by their name only; their insides belong to their own scopes)."""
    names: set[str] = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            names.update(_target_names(node.target))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in body:
        visit(stmt)
    return names


def _declared_global(body) -> set[str]:
    found: set[str] = set()

    def visit(node):
        if isinstance(node, ast.Global):
            found.update(node.names)
        if isinstance(node, _SCOPE_NODES):
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in body:
        visit(stmt)
    return found


def _arg_names(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


class _GlobalRefs(ast.NodeVisitor):
    """Collects the `ast.Name` nodes of a top-level statement that refer to module-level names."""

    def __init__(self):
        self.refs: dict[str, list[ast.Name]] = defaultdict(list)
        self.scopes: list[set[str]] = []  # locals of the enclosing functions, innermost last
        self.class_locals: set[str] | None = None  # names the class body we are directly in has bound so far

    def _is_global(self, node: ast.Name) -> bool:
        if any(node.id in scope for scope in self.scopes):
            return False
        if self.class_locals is None:
            return True
        # A class body binds its names in order: until a name is bound there (and on the right of its own
        # binding, `f = staticmethod(f)`) reading it reads the module-level name.
        return isinstance(node.ctx, ast.Load) and node.id not in self.class_locals

    def visit_Name(self, node):
        if self._is_global(node):
            self.refs[node.id].append(node)

    def _visit_function_scope(self, args, body):
        local = (_arg_names(args) | _bound_names(body)) - _declared_global(body)
        saved, self.class_locals = self.class_locals, None
        self.scopes.append(local)
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()
        self.class_locals = saved

    def _visit_signature(self, args: ast.arguments):
        """Defaults and annotations are evaluated in the enclosing scope."""
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)

    def visit_FunctionDef(self, node):
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._visit_signature(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._visit_function_scope(node.args, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._visit_signature(node.args)
        self._visit_function_scope(node.args, [ast.Expr(node.body)])

    def visit_ClassDef(self, node):
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        saved, self.class_locals = self.class_locals, set()
        for stmt in node.body:
            self.visit(stmt)
            self.class_locals |= _bound_names([stmt])
        self.class_locals = saved

    def _visit_comprehension(self, node, parts):
        generators = node.generators
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        local = set().union(*(_target_names(g.target) for g in generators))
        saved, self.class_locals = self.class_locals, None
        self.scopes.append(local)
        for i, gen in enumerate(generators):
            if i:
                self.visit(gen.iter)
            for cond in gen.ifs:
                self.visit(cond)
        for part in parts:
            self.visit(part)
        self.scopes.pop()
        self.class_locals = saved

    def visit_ListComp(self, node):
        self._visit_comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node):
        self._visit_comprehension(node, [node.key, node.value])


def global_refs(stmt: ast.stmt) -> dict[str, list[ast.Name]]:
    """Name nodes in a top-level statement that refer to module-level (or builtin) names."""
    collector = _GlobalRefs()
    collector.visit(stmt)
    return collector.refs


# ------------------------------------------------------------------------------------------------
# Modules, statements, symbols
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExtSymbol:
    """Something imported from outside the package: `import m [as x]` (attr None) or `from m import attr`."""

    module: str
    attr: str | None = None
    submodule_import: str | None = field(default=None, compare=False)  # `import a.b.c` binds `a`, imports a.b.c

    def home_name(self) -> str:
        return self.attr if self.attr is not None else self.module.split(".")[-1]

    def import_line(self, name: str) -> str:
        if self.attr is not None:
            return f"from {self.module} import {self.attr}" + ("" if name == self.attr else f" as {name}")
        return f"import {self.module}" + ("" if name == self.module else f" as {name}")


@dataclass(frozen=True)
class DefSymbol:
    """A name defined at the top level of a package module."""

    module: str
    name: str

    def home_name(self) -> str:
        return self.name


@dataclass(frozen=True)
class ModuleSymbol:
    """A package module bound to a name (`from . import mlp`); only usable as `mlp.attr`."""

    module: str


@dataclass(frozen=True)
class _InternalImport:
    module: str
    attr: str | None  # None: the module itself


@dataclass
class _Statement:
    module: "_Module"
    index: int
    node: ast.stmt
    defines: set[str]
    mutates: set[str]
    refs: dict[str, list[ast.Name]]


@dataclass
class _Module:
    name: str
    path: Path
    is_package: bool
    source: str
    tree: ast.Module
    statements: list[_Statement] = field(default_factory=list)
    bindings: dict[str, object] = field(default_factory=dict)  # name -> DefSymbol | ExtSymbol | _InternalImport
    star_imports: list[str] = field(default_factory=list)
    future: set[str] = field(default_factory=set)
    explicit_all: list[str] | None = None
    definers: dict[str, list[_Statement]] = field(default_factory=lambda: defaultdict(list))
    mutators: dict[str, list[_Statement]] = field(default_factory=lambda: defaultdict(list))

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    def where(self, node) -> str:
        return f"{self.path}:{getattr(node, 'lineno', '?')}"


def _is_type_checking_block(node) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _is_main_block(node) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    return isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"


def _base_name(expr) -> str | None:
    """`X` for `X`, `X[...]`, `X.a.b`, `X.update(...)`: the module-level object an expression touches."""
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


class _Package:
    """The parsed modules of one package, loaded on demand."""

    def __init__(self, package: str):
        self.package = package
        self.modules: dict[str, _Module] = {}

    def is_internal(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            self.modules[name] = self._parse(name)
        return self.modules[name]

    def has_module(self, name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def _parse(self, name: str) -> _Module:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            raise FlattenError(f"cannot find the source of module {name}")
        path = Path(spec.origin)
        source = path.read_text(encoding="utf-8")
        module = _Module(name=name, path=path, is_package=spec.submodule_search_locations is not None,
                         source=source, tree=ast.parse(source, filename=str(path)))
        for index, node in enumerate(module.tree.body):
            self._index_statement(module, index, node)
        return module

    def _resolve_from(self, module: _Module, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module
        base = module.package.split(".")
        if node.level - 1 > len(base) - 1:
            raise FlattenError(f"{module.where(node)}: relative import beyond the top-level package")
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _index_statement(self, module: _Module, index: int, node: ast.stmt) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # docstring or bare constant
        if _is_type_checking_block(node) or _is_main_block(node):
            return
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            module.future.update(a.name for a in node.names)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._bind_import(module, node, alias)
            return
        if isinstance(node, ast.ImportFrom):
            source = self._resolve_from(module, node)
            for alias in node.names:
                if alias.name == "*":
                    if not self.is_internal(source):
                        raise FlattenError(f"{module.where(node)}: `from {source} import *` cannot be flattened; "
                                           f"import the names it needs")
                    module.star_imports.append(source)
                elif self.is_internal(source):
                    module.bindings[alias.asname or alias.name] = _InternalImport(source, alias.name)
                else:
                    module.bindings[alias.asname or alias.name] = ExtSymbol(source, alias.name)
            return
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                module.explicit_all = list(ast.literal_eval(node.value))
            except ValueError:
                module.explicit_all = None  # computed __all__: fall back to public names
            return
        defines = _bound_names([node])
        mutates: set[str] = set()
        if not defines:
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Expr):
                targets = [node.value] if isinstance(node.value, ast.Call) and isinstance(node.value.func,
                                                                                          ast.Attribute) else []
            mutates = {name for t in targets if (name := _base_name(t)) is not None}
            if not mutates:
                return  # a bare call (registration) or other side effect: not part of the code
        statement = _Statement(module, index, node, defines, mutates, global_refs(node))
        module.statements.append(statement)
        for name in defines:
            module.bindings[name] = DefSymbol(module.name, name)
            module.definers[name].append(statement)
        for name in mutates:
            module.mutators[name].append(statement)

    def _bind_import(self, module: _Module, node: ast.Import, alias: ast.alias) -> None:
        target = alias.name
        if self.is_internal(target):
            if alias.asname:
                module.bindings[alias.asname] = _InternalImport(target, None)
            else:
                module.bindings[target.split(".")[0]] = _InternalImport(target.split(".")[0], None)
            return
        if alias.asname:
            parent, _, last = target.rpartition(".")
            module.bindings[alias.asname] = ExtSymbol(parent, last) if parent else ExtSymbol(target)
        else:
            top = target.split(".")[0]
            module.bindings[top] = ExtSymbol(top, None, submodule_import=target if "." in target else None)

    # -- name resolution ------------------------------------------------------------------------
    def resolve(self, module_name: str, name: str, _seen=None):
        """The symbol `name` denotes in module `module_name` (following re-exports)."""
        seen = set() if _seen is None else _seen
        if (module_name, name) in seen:
            raise FlattenError(f"circular re-export of {name!r} through {module_name}")
        seen.add((module_name, name))
        module = self.module(module_name)
        binding = module.bindings.get(name)
        if binding is not None:
            return self._follow(binding, seen)
        if module.is_package and self.has_module(f"{module_name}.{name}"):
            return ModuleSymbol(f"{module_name}.{name}")
        for source in module.star_imports:
            exported = self.module(source).explicit_all
            if exported is not None and name not in exported:
                continue
            if exported is None and name.startswith("_"):
                continue
            try:
                return self.resolve(source, name, seen)
            except FlattenError:
                continue
        return None

    def _follow(self, binding, seen):
        if isinstance(binding, _InternalImport):
            if binding.attr is None:
                return ModuleSymbol(binding.module)
            found = self.resolve(binding.module, binding.attr, seen)
            if found is None:
                raise FlattenError(f"cannot find {binding.attr!r} in module {binding.module}")
            return found
        return binding


# ------------------------------------------------------------------------------------------------
# Closure: which statements each unit needs
# ------------------------------------------------------------------------------------------------

@dataclass
class Unit:
    """One generated file: `roots` are the objects (classes, functions) it must define."""

    module_name: str  # the generated file's module name, e.g. "modeling_xfmr_bert"
    roots: list
    docstring: str = ""
    exports: list[str] | None = None  # names for `__all__` (default: the roots' names)


@dataclass
class _UnitPlan:
    unit: Unit
    statements: list[_Statement] = field(default_factory=list)
    symbols: dict[object, None] = field(default_factory=dict)  # ordered set of DefSymbol / ExtSymbol used
    imported: dict[DefSymbol, "_UnitPlan"] = field(default_factory=dict)  # defined by an earlier unit
    uses: dict[tuple[str, str], object] = field(default_factory=dict)  # (module, local name) -> symbol
    attr_uses: list[tuple[_Module, ast.Attribute, object]] = field(default_factory=list)
    builtins_used: set[str] = field(default_factory=set)
    module_order: list[str] = field(default_factory=list)
    flat: dict[object, str] = field(default_factory=dict)  # symbol -> name in this file
    aliases: dict[DefSymbol, list[str]] = field(default_factory=lambda: defaultdict(list))
    ext_lines: dict[str, None] = field(default_factory=dict)
    submodule_imports: dict[str, None] = field(default_factory=dict)
    renames: dict[tuple[str, str], str] = field(default_factory=dict)  # (module, local name) -> new text


class _Planner:
    def __init__(self, package: _Package):
        self.pkg = package

    def plan(self, unit: Unit, earlier: list[_UnitPlan]) -> _UnitPlan:
        plan = _UnitPlan(unit)
        defined_earlier = {sym: p for p in earlier for sym in p.symbols if isinstance(sym, DefSymbol)}
        included: set[int] = set()
        statements: list[_Statement] = []
        module_deps: dict[str, list[str]] = defaultdict(list)
        done: set[object] = set()

        def need(symbol, from_module: str | None):
            if isinstance(symbol, DefSymbol) and symbol in defined_earlier:
                plan.imported[symbol] = defined_earlier[symbol]
                plan.symbols[symbol] = None
                return
            plan.symbols[symbol] = None
            if isinstance(symbol, ExtSymbol) and symbol.submodule_import:
                plan.submodule_imports[f"import {symbol.submodule_import}"] = None
            if isinstance(symbol, DefSymbol) and from_module is not None and symbol.module != from_module:
                if symbol.module not in module_deps[from_module]:
                    module_deps[from_module].append(symbol.module)
            if symbol in done or not isinstance(symbol, DefSymbol):
                return
            done.add(symbol)
            module = self.pkg.module(symbol.module)
            for statement in [*module.definers[symbol.name], *module.mutators[symbol.name]]:
                if id(statement) not in included:
                    included.add(id(statement))
                    statements.append(statement)
                    visit_statement(statement)

        def visit_statement(statement: _Statement):
            module = statement.module
            self._check_nested_imports(statement)
            parents = _parent_map(statement.node)
            for name, nodes in statement.refs.items():
                bound = name in module.bindings or module.star_imports
                symbol = self.pkg.resolve(module.name, name) if bound else None
                if symbol is None:  # a builtin (or unbound in the source too: a NameError there as well)
                    if name in BUILTIN_NAMES:
                        plan.builtins_used.add(name)
                    continue
                if isinstance(symbol, ModuleSymbol):
                    for node in nodes:
                        target, final = self._attribute_target(module, node, parents, symbol)
                        plan.attr_uses.append((module, target, final))
                        need(final, module.name)
                    continue
                plan.uses[(module.name, name)] = symbol
                need(symbol, module.name)

        for root in unit.roots:
            module_name, name = root.__module__, root.__name__
            if not self.pkg.is_internal(module_name):
                raise FlattenError(f"{name} is defined in {module_name}, outside the package {self.pkg.package}")
            symbol = self.pkg.resolve(module_name, name)
            if not isinstance(symbol, DefSymbol):
                raise FlattenError(f"{module_name}.{name} is not defined at the top level of its module")
            need(symbol, None)
        root_modules = list(dict.fromkeys(self.pkg.resolve(r.__module__, r.__name__).module for r in unit.roots))
        plan.module_order = _dependency_order(root_modules, module_deps,
                                              {s.module.name for s in statements})
        rank = {m: i for i, m in enumerate(plan.module_order)}
        plan.statements = sorted(statements, key=lambda s: (rank[s.module.name], s.index))
        return plan

    def _attribute_target(self, module, node, parents, symbol):
        """For `mod.a.b` where `mod` is a package module: the outermost Attribute and its symbol."""
        current, target = symbol, node
        while isinstance(current, ModuleSymbol):
            parent = parents.get(id(target))
            if not isinstance(parent, ast.Attribute) or parent.value is not target:
                raise FlattenError(f"{module.where(node)}: the module {current.module} is used as a value; "
                                   f"import the names it needs instead (`from ... import name`)")
            current = self.pkg.resolve(current.module, parent.attr)
            if current is None:
                raise FlattenError(f"{module.where(node)}: {parent.attr!r} not found")
            target = parent
        return target, current

    def _check_nested_imports(self, statement: _Statement):
        module = statement.module
        for inner in ast.walk(statement.node):
            if isinstance(inner, ast.ImportFrom) and (inner.level or self.pkg.is_internal(inner.module or "")):
                raise FlattenError(
                    f"{module.where(inner)}: `from {'.' * inner.level}{inner.module or ''} import ...` inside a "
                    f"function cannot be flattened; import it at the top of the module"
                )
            if isinstance(inner, ast.Import) and any(self.pkg.is_internal(a.name) for a in inner.names):
                raise FlattenError(f"{module.where(inner)}: importing {self.pkg.package} inside a function "
                                   f"cannot be flattened; import it at the top of the module")


def _parent_map(root) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def _dependency_order(roots: list[str], deps: dict[str, list[str]], needed: set[str]) -> list[str]:
    """Modules after the modules they use (depth-first post-order), starting from the roots' modules."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name):
        if state.get(name):
            return
        state[name] = 1
        for dep in deps.get(name, ()):
            visit(dep)
        order.append(name)

    for name in roots:
        visit(name)
    for name in sorted(needed):  # anything reached only through mutations
        visit(name)
    return [m for m in order if m in needed]


# ------------------------------------------------------------------------------------------------
# Names in the flat file
# ------------------------------------------------------------------------------------------------

def _assign_names(plan: _UnitPlan, pkg: _Package) -> None:
    taken: dict[str, object] = {name: ("builtin", name) for name in plan.builtins_used}
    reserved: set[str] = set(BUILTIN_NAMES)
    for statement in plan.statements:
        reserved.update(n.id for n in ast.walk(statement.node) if isinstance(n, ast.Name))
        reserved.update(n.name for n in ast.walk(statement.node)
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))

    def fresh(base: str, module: str) -> str:
        short = module.rsplit(".", 1)[-1]
        for candidate in [f"{base}_{short}", *(f"{base}_{short}{i}" for i in range(2, 1000))]:
            if candidate not in taken and candidate not in reserved:
                reserved.add(candidate)
                return candidate
        raise FlattenError(f"cannot find a free name for {base}")

    # 1. Every symbol under its own name, first come first served (emission order).
    ordered = [s for s in plan.symbols if s in plan.imported]
    ordered += [DefSymbol(st.module.name, n) for st in plan.statements for n in sorted(st.defines)]
    ordered += [s for s in plan.symbols if isinstance(s, ExtSymbol)]
    for symbol in dict.fromkeys(ordered):
        if symbol not in plan.symbols:
            continue  # defined by a kept statement but never used (e.g. the second name of `a, b = ...`)
        if symbol in plan.imported:
            home = plan.imported[symbol].flat[symbol]
        else:
            home = _home_name(symbol, plan)
        if taken.get(home, symbol) == symbol:
            taken[home] = symbol
            plan.flat[symbol] = home
        else:
            module = symbol.module if isinstance(symbol, (DefSymbol, ExtSymbol)) else "x"
            plan.flat[symbol] = fresh(home, module)
            taken[plan.flat[symbol]] = symbol

    # Names bound by kept statements but unused still occupy their name in the file.
    for statement in plan.statements:
        for name in statement.defines:
            symbol = DefSymbol(statement.module.name, name)
            if symbol not in plan.flat:
                if name in taken and taken[name] != symbol:
                    plan.flat[symbol] = fresh(name, statement.module.name)
                else:
                    plan.flat[symbol] = name
                taken[plan.flat[symbol]] = symbol

    # 2. Local names that differ from the flat name: an alias if free, else rewrite the references.
    for (module, local), symbol in plan.uses.items():
        flat = plan.flat[symbol]
        if local == flat:
            continue
        if local not in taken:
            taken[local] = symbol
            if isinstance(symbol, ExtSymbol):
                plan.ext_lines[symbol.import_line(local)] = None
            else:
                plan.aliases[symbol].append(local)
        elif taken[local] != symbol:
            plan.renames[(module, local)] = flat
    # A renamed definition is also renamed where it is defined.
    for symbol, flat in plan.flat.items():
        if isinstance(symbol, DefSymbol) and symbol not in plan.imported and flat != symbol.name:
            plan.renames[(symbol.module, symbol.name)] = flat

    for symbol in plan.symbols:
        if isinstance(symbol, ExtSymbol):
            plan.ext_lines[symbol.import_line(plan.flat[symbol])] = None
    for line in plan.submodule_imports:
        plan.ext_lines[line] = None
    for module in dict.fromkeys(s.module.name for s in plan.statements):
        for name in sorted(pkg.module(module).future):
            plan.ext_lines[f"from __future__ import {name}"] = None


def _home_name(symbol, plan: _UnitPlan) -> str:
    if isinstance(symbol, ExtSymbol):
        # The name most modules use for it.
        names = [local for (_, local), s in plan.uses.items() if s == symbol]
        return max(set(names), key=names.count) if names else symbol.home_name()
    return symbol.home_name()


# ------------------------------------------------------------------------------------------------
# Emission
# ------------------------------------------------------------------------------------------------

class _Source:
    """A module's source as bytes with line offsets, for exact edits at AST positions."""

    def __init__(self, text: str):
        self.lines = text.encode("utf-8").splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.data = b"".join(self.lines)

    def offset(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + col


def _statement_span(module: _Module, src: _Source, node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    while first > 1 and src.lines[first - 2].strip().startswith(b"#"):
        first -= 1  # comment lines directly above belong to the statement
    end_line = src.lines[node.end_lineno - 1]
    rest = end_line[node.end_col_offset:].strip()
    end = src.starts[node.end_lineno] if not rest or rest.startswith(b"#") else \
        src.offset(node.end_lineno, node.end_col_offset)
    return src.starts[first - 1], end


def _def_name_span(src: _Source, node) -> tuple[int, int]:
    """Byte span of the name in `def name(` / `class name`."""
    line = src.lines[node.lineno - 1]
    keyword = b"class" if isinstance(node, ast.ClassDef) else b"def"
    start = line.index(keyword, node.col_offset) + len(keyword)
    while line[start:start + 1].isspace():
        start += 1
    begin = src.offset(node.lineno, start)
    return begin, begin + len(node.name.encode())


def _emit_statement(statement: _Statement, plan: _UnitPlan, sources: dict[str, _Source]) -> str:
    module = statement.module
    src = sources.setdefault(module.name, _Source(module.source))
    begin, end = _statement_span(module, src, statement.node)
    edits: list[tuple[int, int, str]] = []
    for name, nodes in statement.refs.items():
        new = plan.renames.get((module.name, name))
        if new is not None:
            edits += [(src.offset(n.lineno, n.col_offset), src.offset(n.end_lineno, n.end_col_offset), new)
                      for n in nodes]
    node = statement.node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        new = plan.renames.get((module.name, node.name))
        if new is not None:
            edits.append((*_def_name_span(src, node), new))
    for attr_module, attr_node, symbol in plan.attr_uses:
        if attr_module is module and _contains(node, attr_node):
            edits.append((src.offset(attr_node.lineno, attr_node.col_offset),
                          src.offset(attr_node.end_lineno, attr_node.end_col_offset), plan.flat[symbol]))
    text = bytearray(src.data[begin:end])
    for start, stop, new in sorted(edits, reverse=True):
        text[start - begin:stop - begin] = new.encode()
    return text.decode("utf-8").rstrip() + "\n"


def _contains(root, target) -> bool:
    return any(node is target for node in ast.walk(root))


def _import_block(lines) -> str:
    """Import lines merged per module (`from m import a, b`) in three groups: __future__, stdlib, others."""
    plain: list[str] = []
    merged: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        if line.startswith("from "):
            module, _, names = line[len("from "):].partition(" import ")
            merged[module].append(names)
        else:
            plain.append(line)
    groups: list[list[str]] = [[], [], []]
    for line in plain:
        top = line.split()[1].split(".")[0]
        groups[1 if top in sys.stdlib_module_names else 2].append(line)
    for module, names in merged.items():
        top = module.split(".")[0]
        group = 0 if module == "__future__" else 1 if top in sys.stdlib_module_names else 2
        groups[group].append(_from_import(module, sorted(set(names), key=lambda n: (n.lower(), n))))
    return "\n\n".join("\n".join(sorted(g, key=_import_sort_key)) for g in groups if g)


def _from_import(module: str, names: list[str]) -> str:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= 100:
        return line
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in names) + ")"


def _import_sort_key(line: str):
    parts = line.split()
    return (parts[1], parts[0] == "from", line)


def render_unit(plan: _UnitPlan, header: str, package_root: Path | None) -> str:
    """The text of one generated file."""
    sources: dict[str, _Source] = {}
    out = [header.rstrip() + "\n"] if header.strip() else []
    if plan.unit.docstring:
        out.append('"""' + plan.unit.docstring.strip().replace('"""', r"\"\"\"") + '\n"""\n')
    imports = _import_block(list(plan.ext_lines))
    if imports:
        out.append("\n" + imports + "\n")
    by_unit: dict[str, list[str]] = defaultdict(list)
    for symbol, earlier in plan.imported.items():
        name_there = earlier.flat[symbol]
        names = [plan.flat[symbol], *plan.aliases.get(symbol, [])]
        for name in dict.fromkeys(names):
            by_unit[earlier.unit.module_name].append(name_there if name == name_there else f"{name_there} as {name}")
    for unit_name, names in by_unit.items():
        out.append(f"\nfrom .{unit_name} import {', '.join(sorted(set(names)))}\n")
    current = None
    for statement in plan.statements:
        if statement.module.name != current:
            current = statement.module.name
            shown = _display_path(statement.module.path, package_root)
            out.append(f"\n\n# {'-' * 4} from {shown} {'-' * max(4, 90 - len(shown))}\n")
        out.append("\n\n" + _emit_statement(statement, plan, sources))
        for name in sorted(statement.defines):
            symbol = DefSymbol(statement.module.name, name)
            if statement is statement.module.definers[name][-1] and plan.aliases.get(symbol):
                out.append("\n\n" + "".join(f"{alias} = {plan.flat[symbol]}  # imported under this name elsewhere\n"
                                              for alias in plan.aliases[symbol]))
    exports = plan.unit.exports or [plan.flat[_root_symbol(r)] for r in plan.unit.roots]
    out.append("\n\n__all__ = [" + ", ".join(repr(n) for n in exports) + "]\n")
    return "".join(out)


def _root_symbol(root) -> DefSymbol:
    return DefSymbol(root.__module__, root.__name__)


def _display_path(path: Path, package_root: Path | None) -> str:
    if package_root is not None:
        try:
            return path.relative_to(package_root.parent).as_posix()
        except ValueError:
            pass
    return path.name


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------

@dataclass
class FlatFile:
    module_name: str
    text: str
    names: dict[str, str]  # root qualified name ("pkg.mod.Class") -> its name in the flat file
    sources: list[str]  # the package modules it was generated from


def flatten_units(units: list[Unit], package: str, header=None) -> list[FlatFile]:
    """Generate one flat file per unit (later units import what earlier ones define).

    `header(sources)` returns the comment put at the top of a file generated from `sources` (paths).
    """
    pkg = _Package(package)
    top = sys.modules.get(package)
    package_root = Path(top.__file__).parent if top is not None and getattr(top, "__file__", None) else None
    planner = _Planner(pkg)
    plans: list[_UnitPlan] = []
    files = []
    for unit in units:
        plan = planner.plan(unit, plans)
        _assign_names(plan, pkg)
        plans.append(plan)
        sources = list(dict.fromkeys(_display_path(s.module.path, package_root) for s in plan.statements))
        text = render_unit(plan, header(sources) if header is not None else "", package_root)
        names = {f"{r.__module__}.{r.__name__}": plan.flat[_root_symbol(r)] for r in unit.roots}
        files.append(FlatFile(unit.module_name, text, names, sources))
    return files


def check_flat_file(text: str, filename: str, package: str, allowed_relative: set[str]) -> None:
    """Raise FlattenError if `text` is not valid Python, still imports `package`, or has a relative
    import other than `from .<one of allowed_relative> import ...`."""
    try:
        tree = ast.parse(text, filename=filename)
        compile(tree, filename, "exec")
    except SyntaxError as err:
        raise FlattenError(f"generated {filename} is not valid Python: {err}") from err
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name.split(".")[0] == package]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                ok = node.level == 1 and node.module in allowed_relative
                bad = [] if ok else [f"{'.' * node.level}{node.module or ''}"]
            else:
                bad = [node.module] if (node.module or "").split(".")[0] == package else []
        else:
            continue
        if bad:
            raise FlattenError(f"generated {filename} still imports {', '.join(bad)} (line {node.lineno})")
