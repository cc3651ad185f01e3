"""The flattener behind the Hub export, on a small synthetic package that uses every import form the
real code base may use (relative and absolute imports, re-exports through `__init__`, `import *`,
aliases, module objects, name collisions, a definition shadowing a builtin, mutated registries), and
on the real architectures."""

import importlib
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from hf_xfmr.hub.flatten import FlattenError, Unit, check_flat_file, flatten_units, global_refs
from hf_xfmr.hub.remote_code import generate_remote_code
from hf_xfmr.models import architectures

SOURCES = {
    "__init__.py": "from . import models  # importing the package registers things\n",
    "registry.py": "REGISTRY = []\n",
    "layers/__init__.py": "from .ops import *\n",
    "layers/ops.py": '''
        """Math helpers."""
        import math
        from math import sqrt as square_root

        from ..registry import REGISTRY

        __all__ = ["scale", "Twice", "KERNELS", "EPS"]

        EPS = 1e-6


        def helper(x):
            return x + 1


        # A comment that belongs to scale.
        def scale(x, factor=2):
            return helper(x) * factor  # trailing comment kept


        KERNELS = {"a": scale}


        def twice(x):
            return 2 * x


        KERNELS["b"] = twice
        REGISTRY.append("ops")  # a registration side effect: not part of the generated code


        class Twice:
            factor = 2

            def __call__(self, x):
                return scale(x, self.factor) + int(square_root(math.floor(x * x)))


        def unused():
            return "never exported"
    ''',
    "models/__init__.py": "from . import model  # noqa\n",
    "models/util.py": '''
        def helper(x):
            return x - 1


        def builtin_user(values):
            return max(values) + len(values)
    ''',
    "models/shadow.py": '''
        def max(a, b):
            return "shadowing max"
    ''',
    "models/config.py": '''
        from ..layers.ops import EPS


        class Config:
            eps = EPS

            def __init__(self, size=3):
                self.size = size
    ''',
    "models/model.py": '''
        import math as m
        from typing import TYPE_CHECKING

        from . import util
        from ..layers import Twice, scale
        from ..layers.ops import KERNELS as kernels
        from .config import Config
        from .shadow import max as shadow_max
        from .util import helper as minus_one

        if TYPE_CHECKING:
            from .config import Config as TypingOnly


        class Base:
            config_class = Config


        class Model(Base):
            def __init__(self, config):
                self.config = config
                self.twice = Twice()

            def forward(self, x):
                helper = util.helper  # a local named like a global of another module
                scale_ = scale
                dropout = [helper(i) for i in range(2)]
                return [self.twice(x), kernels["b"](x), kernels["a"](x), scale_(x), helper(x), minus_one(x),
                        util.builtin_user([x, 1]), shadow_max(1, 2), m.floor(x / 2), dropout, self.config.eps]


        class Head(Model):
            def forward(self, x):
                return super().forward(x) + [self.config.size]
    ''',
}


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throwaway importable package with SOURCES (a unique name, so nothing is cached between tests)."""
    name = f"fakepkg_{uuid.uuid4().hex[:8]}"
    for rel, text in SOURCES.items():
        path = tmp_path / "src" / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    yield name, tmp_path / "src" / name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def _generate(name, tmp_path, monkeypatch):
    model_mod = importlib.import_module(f"{name}.models.model")
    config_mod = importlib.import_module(f"{name}.models.config")
    files = flatten_units(
        [Unit("configuration_fake", [config_mod.Config]), Unit("modeling_fake", [model_mod.Model, model_mod.Head])],
        package=name, header=lambda sources: "# generated from " + ", ".join(sources),
    )
    out_name = f"flat_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "flat" / out_name
    out.mkdir(parents=True)
    (out / "__init__.py").write_text("")
    for file in files:
        (out / f"{file.module_name}.py").write_text(file.text)
    monkeypatch.syspath_prepend(str(tmp_path / "flat"))
    importlib.invalidate_caches()
    flat_model = importlib.import_module(f"{out_name}.modeling_fake")
    flat_config = importlib.import_module(f"{out_name}.configuration_fake")
    return files, model_mod, config_mod, flat_model, flat_config


def test_flat_code_behaves_like_the_package(package, tmp_path, monkeypatch):
    name, _ = package
    files, model_mod, config_mod, flat_model, flat_config = _generate(name, tmp_path, monkeypatch)
    for cls in ("Model", "Head"):
        expected = getattr(model_mod, cls)(config_mod.Config()).forward(7)
        assert getattr(flat_model, cls)(flat_config.Config()).forward(7) == expected
    assert expected[7] == "shadowing max" and expected[6] == 7 + 2  # the shadowing def and builtin max both work
    # The config class exists once: the modeling file imports it from the configuration file.
    assert flat_model.Base.config_class is flat_config.Config
    assert files[1].names[f"{name}.models.model.Model"] == "Model"


def test_flat_code_keeps_only_what_is_needed_with_comments(package, tmp_path, monkeypatch):
    name, _ = package
    files, *_ = _generate(name, tmp_path, monkeypatch)
    config_text, model_text = files[0].text, files[1].text
    for text, filename in ((config_text, "configuration_fake.py"), (model_text, "modeling_fake.py")):
        check_flat_file(text, filename, name, allowed_relative={"configuration_fake"})
        assert all(name not in line for line in text.splitlines() if not line.startswith("#"))  # only comments
        assert "unused" not in text and "REGISTRY" not in text and "TypingOnly" not in text
        assert '"""Math helpers."""' not in text  # module docstrings of inlined modules are dropped
    assert "from .configuration_fake import Config\n" in model_text
    assert "class Config" not in model_text and "EPS = 1e-6" in config_text
    assert "# A comment that belongs to scale.\ndef scale(" in model_text
    assert "# trailing comment kept" in model_text
    assert 'KERNELS["b"] = twice' in model_text  # a mutation of a kept registry is kept
    assert "from math import sqrt as square_root" in model_text and "import math as m" in model_text
    # Two different `helper`s: one is renamed (definition and references), the other keeps its name.
    assert "def helper(x):\n    return x + 1" in model_text and "def helper_util(x):\n    return x - 1" in model_text
    assert "helper = util.helper" not in model_text and "helper = helper_util" in model_text
    # `max` shadows a builtin another module uses: renamed, and its alias points at the new name.
    assert "def max_shadow(a, b):" in model_text and "shadow_max = max_shadow" in model_text
    assert "minus_one = helper_util" in model_text
    assert model_text.rstrip().endswith("__all__ = ['Model', 'Head']")


def test_unflattenable_code_is_reported_with_its_location(package, tmp_path, monkeypatch):
    name, root = package
    (root / "models" / "lazy.py").write_text(textwrap.dedent('''
        def load():
            from .util import helper
            return helper(1)


        class Lazy:
            def forward(self):
                return load()
    '''))
    (root / "models" / "valued.py").write_text(textwrap.dedent('''
        from . import util


        class Valued:
            def forward(self):
                return util
    '''))
    importlib.invalidate_caches()
    lazy = importlib.import_module(f"{name}.models.lazy")
    with pytest.raises(FlattenError, match=r"lazy.py:3: `from .util import ...` inside a function cannot be flattened"):
        flatten_units([Unit("modeling_x", [lazy.Lazy])], package=name)
    valued = importlib.import_module(f"{name}.models.valued")
    with pytest.raises(FlattenError, match=r"valued.py:7: the module .*util is used as a value"):
        flatten_units([Unit("modeling_x", [valued.Valued])], package=name)
    with pytest.raises(FlattenError, match="outside the package"):
        flatten_units([Unit("modeling_x", [Path])], package=name)


def test_check_flat_file_rejects_leftover_imports():
    with pytest.raises(FlattenError, match="still imports hf_xfmr.layers"):
        check_flat_file("from hf_xfmr.layers import MLP\n", "m.py", "hf_xfmr", set())
    with pytest.raises(FlattenError, match=r"still imports \.\.models"):
        check_flat_file("from ..models import x\n", "m.py", "hf_xfmr", set())
    with pytest.raises(FlattenError, match="not valid Python"):
        check_flat_file("def broken(:\n", "m.py", "hf_xfmr", set())
    check_flat_file("from .configuration_x import C\nimport torch\n", "m.py", "hf_xfmr", {"configuration_x"})


def test_global_refs_respect_python_scopes():
    import ast

    tree = ast.parse(textwrap.dedent('''
        def f(a, b=DEFAULT):
            c = a + GLOBAL
            g = lambda d: d + c + OTHER
            return [e for e in ITEMS if e] + [b]
    '''))
    refs = global_refs(tree.body[0])
    assert set(refs) == {"DEFAULT", "GLOBAL", "OTHER", "ITEMS"}


def test_a_class_body_reads_the_module_name_until_it_binds_its_own():
    import ast

    tree = ast.parse(textwrap.dedent('''
        class Embeddings:
            position_ids = staticmethod(position_ids)  # the module-level function, then a class attribute
            size = SIZE
            double = size * 2  # the class's own `size`

            def forward(self):
                return self.position_ids() + size  # a method does not see class names: the module's
    '''))
    refs = global_refs(tree.body[0])
    assert set(refs) == {"position_ids", "staticmethod", "SIZE", "size"}
    assert [n.lineno for n in refs["position_ids"]] == [3] and [n.lineno for n in refs["size"]] == [8]


@pytest.mark.parametrize("arch", architectures(), ids=lambda a: a.name)
def test_every_architecture_generates_flat_code(arch):
    code = generate_remote_code(arch)
    stem = arch.model_type.replace("-", "_")
    assert set(code.files) == {f"configuration_{stem}.py", f"modeling_{stem}.py"}
    for cls in {arch.config_class, *arch.classes.values()}:
        assert f"class {code.class_names[cls]}(" in "".join(code.files.values())
    assert code.auto_map["AutoConfig"] == f"configuration_{stem}.{arch.config_class.__name__}"
    check_flat_file(code.files[f"modeling_{stem}.py"], "modeling.py", "hf_xfmr", {f"configuration_{stem}"})
    check_flat_file(code.files[f"configuration_{stem}.py"], "configuration.py", "hf_xfmr", set())
