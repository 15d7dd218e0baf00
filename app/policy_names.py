"""What the policy gate (``app.policy``) lets a snippet name: modules, builtins, attributes, methods.

Lists only, no logic. The rule of thumb behind them: what PyTorch's own docs and tutorials write runs
(``input`` as a variable, ``torch.optim.lr_scheduler``, ``torch.amp``, ``torch.backends.cudnn.benchmark
= True``...); what evaluates or compiles a string, walks attributes by a computed name, or makes a class
from a namespace dict is refused, each refusal with what to write instead (``app.run_errors``).
"""

from __future__ import annotations

MAX_NODES = 5000
MAX_DEPTH = 50

ALLOWED_IMPORTS = frozenset(
    {
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.nn.init",
        "torch.nn.parameter",
        "torch.autograd",
        "torch.autograd.graph",
        "torch.autograd.functional",
        "torch.autograd.function",
        "torch.autograd.forward_ad",
        "torch.optim",
        "torch.optim.lr_scheduler",
        "torch.optim.swa_utils",
        "torch.amp",
        "torch.cuda",
        "torch.cuda.amp",
        "torch.cpu",  # torch.cpu.amp.autocast(): older CPU mixed-precision recipes
        "torch.cpu.amp",
        "torch.backends",
        "torch.backends.cudnn",
        "torch.backends.cuda",
        "torch.backends.mps",
        "torch.accelerator",
        "torch.linalg",
        "torch.fft",
        "torch.special",
        "torch.sparse",
        "torch.testing",
        "torch.distributions",
        "torch.func",
        "torch.random",
        "torch.types",
        "torch.utils.data",
        "torch.utils.data.sampler",
        "torch.utils.checkpoint",
        "torch.nn.utils",
        "torch.nn.utils.parametrize",
        "torch.nn.utils.parametrizations",
        "torch.nn.utils.prune",
        "torch.nn.utils.rnn",
        "torch.nn.parallel",  # the DCGAN tutorial's imports (torch.nn.DataParallel on the CPU)
        "torch.nn.grad",  # conv2d_input / conv2d_weight: the conv-bn fusion tutorial's backward
        "__future__",
        "math",
        "random",
        "itertools",
        "collections",
        "collections.abc",
        "copy",
        "dataclasses",
        "functools",
        "typing",
        "string",
        "re",
        "time",
        "unicodedata",
        "warnings",
        "gc",
        "numpy",
        "torch.nn.attention",
        # the standard library's plain helpers, as tutorials and learners import them
        "abc",
        "bisect",
        "heapq",
        "json",
        "numbers",
        "operator",
        "pprint",
        "statistics",
        "textwrap",
        "torch.overrides",  # the "Extending PyTorch" notes: __torch_function__, TorchFunctionMode
        # submodules of the above that tutorials import their classes from
        "torch.distributions.bernoulli",
        "torch.distributions.beta",
        "torch.distributions.categorical",
        "torch.distributions.dirichlet",
        "torch.distributions.independent",
        "torch.distributions.kl",
        "torch.distributions.multivariate_normal",
        "torch.distributions.normal",
        "torch.distributions.one_hot_categorical",
        "torch.distributions.transforms",
        "torch.distributions.uniform",
        "torch.optim.optimizer",
        "torch.optim.sgd",
        "torch.optim.adam",
        "torch.optim.adamw",
        "torch.utils.data.dataset",
        "torch.utils.data.dataloader",
        "torch.utils.hooks",
        "torch.nn.utils.stateless",
        "torch.masked",
        "torch.xpu",  # accelerator checks: torch.xpu.is_available() (ONLY_NAMES)
        "torch.distributions.constraints",
        "torch.version",  # print(torch.version.cuda): the environment check tutorials start with
        # "Saving and loading models" to memory: torch.save(obj, buffer), buffer = io.BytesIO() (ONLY_NAMES)
        "io",
        # torch.jit.trace runs the code on an example (no source is compiled); ONLY_NAMES
        "torch.jit",
        # the profiler recipe: profile / record_function / key_averages().table() (ONLY_NAMES)
        "torch.profiler",
        "torch.autograd.profiler",
        # imported as their own modules too (they are walkable from numpy already)
        "numpy.random",
        "numpy.linalg",
        "numpy.fft",
        # environment checks of the performance recipes (`torch.backends.mkldnn.is_available()`)
        "torch.backends.mkldnn",
        "torch.backends.openmp",
        # the standard library as training scripts use it (some only in part: ONLY_NAMES)
        "contextlib",  # `ctx = nullcontext() if device == "cpu" else torch.autocast(...)`
        "types",  # `args = SimpleNamespace(lr=0.1, epochs=3)`
        "weakref",  # `r = weakref.ref(t); del t; r() is None`: is it freed?
        "datetime",
        "cmath",
        "fractions",
        "decimal",
    }
)
# Modules of which a snippet may use only these names (gc.collect(): checking what is freed, as the
# article's readers do; the rest of gc walks every object of the process).
ONLY_NAMES = {
    "gc": frozenset({"collect", "get_count", "isenabled"}),
    # operator without attrgetter and methodcaller, which walk attributes by the names a string holds
    "operator": frozenset({
        "abs", "add", "and_", "call", "concat", "contains", "countOf", "delitem", "eq", "floordiv", "ge",
        "getitem", "gt", "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imatmul", "imod", "imul",
        "index", "indexOf", "inv", "invert", "ior", "ipow", "irshift", "is_", "is_not", "isub",
        "itemgetter", "itruediv", "ixor", "le", "length_hint", "lshift", "lt", "matmul", "mod", "mul", "ne",
        "neg", "not_", "or_", "pos", "pow", "rshift", "setitem", "sub", "truediv", "truth", "xor",
    }),
    # a file in memory (`buffer = io.BytesIO()`: torch.save / torch.load, the saving tutorial's way
    # without files); io.open and the file classes reach the file system
    "io": frozenset({"BytesIO", "StringIO"}),
    # torch.jit.trace runs the code once on an example and records the ops; torch.jit.script compiles
    # the function's source file, which a snippet has not (a plain run fails the same way), and
    # torch.jit.load / CompilationUnit read files or compile source text
    "torch.jit": frozenset({"trace", "is_tracing", "is_scripting"}),
    # what the profiler recipe uses; its trace handlers write files
    "torch.profiler": frozenset({"profile", "record_function", "ProfilerActivity", "schedule",
                                 "supported_activities"}),
    "torch.autograd.profiler": frozenset({"profile", "record_function"}),
    # redirect_stdout / redirect_stderr would take the output from the explorer
    "contextlib": frozenset({"contextmanager", "nullcontext", "suppress", "ExitStack", "closing",
                             "AbstractContextManager"}),
    # the rest of types makes functions and code objects from their parts
    "types": frozenset({"SimpleNamespace"}),
    "weakref": frozenset({"ref", "proxy", "finalize", "WeakKeyDictionary", "WeakValueDictionary",
                          "WeakSet", "WeakMethod"}),
    # accelerator checks (`elif torch.xpu.is_available():`); there is no XPU here
    "torch.xpu": frozenset({"is_available", "device_count"}),
    # what the "Extending PyTorch" notes use of torch.overrides (not its imported modules)
    "torch.overrides": frozenset({
        "TorchFunctionMode", "BaseTorchFunctionMode", "handle_torch_function", "has_torch_function",
        "has_torch_function_unary", "has_torch_function_variadic", "get_ignored_functions",
        "get_overridable_functions", "get_testing_overrides", "wrap_torch_function", "is_tensor_like",
        "is_tensor_method_or_property", "resolve_name",
    }),
}
# Imports that get their own way forward (``policy.import_instead.<root module>`` in app/run_errors.py):
# what tutorials import that the playground has no use for.
IMPORT_REWRITES = frozenset({"os", "sys", "pathlib", "glob", "matplotlib", "torchvision", "torchaudio",
                             "torchtext", "tqdm", "zipfile", "tarfile", "shutil", "tempfile", "subprocess",
                             "argparse", "logging", "timeit", "enum", "pickle", "requests", "urllib", "PIL",
                             "pandas", "sklearn", "scipy", "IPython", "seaborn", "inspect", "threading",
                             "gym", "gymnasium", "wandb", "transformers", "datasets", "h5py", "cv2"})
# Modules a snippet may walk through by attribute (``torch.utils.data.DataLoader``): its imports, and
# the packages that lead to them. Any other module reached by an attribute path (a module imports
# ``operator``, ``os``, ``functools``... under its own name: ``torch.functional.operator``) is refused:
# such a walk hands out ``attrgetter``/``methodcaller`` and through them everything.
WALKABLE_MODULES = ALLOWED_IMPORTS | {"torch.utils", "torch.distributions.constraints", "numpy.linalg",
                                      "numpy.random", "numpy.fft"}
# Modules every snippet starts with (app.engine.run.prelude).
PRELUDE_MODULES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "math": "math"}
# Builtins that take an attribute name: allowed with a name written in the snippet (checked like
# ``obj.name``), never with a computed one.
NAMED_ATTRIBUTE_BUILTINS = frozenset({"getattr", "setattr", "hasattr", "delattr"})
# Of those, the ones that hand out nothing: with a computed name (the forward-mode AD tutorial's
# `delattr(model, name); setattr(model, name, dual)`, `setattr(self, f"fc{i}", layer)`) they are
# checked when they run, by the builtins a gated snippet gets (app.policy_builtins).
CHECKED_AT_RUN_TIME = frozenset({"setattr", "delattr"})

# Builtins that reach outside the snippet, evaluate strings, or walk objects by computed name. A snippet
# may still use their names for its own things (``input = torch.randn(3)``, ``def hook(module, input,
# output)``): only the builtin itself is refused, and it is not in the builtins a gated snippet gets.
BLOCKED_BUILTINS = frozenset(
    {
        "open",
        "eval",
        "exec",
        "compile",
        "input",
        "breakpoint",
        "help",
        "globals",
        "locals",
        "vars",
        "__import__",
        "memoryview",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
    }
)

# Attributes that lead to the OS, to (de)serialization or code generation, to global state, or that
# evaluate strings, walk attributes by name or make classes from a namespace (the last three: issue 25).
BLOCKED_ATTRIBUTES = frozenset(
    {
        "os",
        "sys",
        "ctypes",
        "builtins",
        "importlib",
        "glob",
        "inspect",
        "platform",
        "threading",
        "subprocess",
        "signal",
        "shutil",
        "tempfile",
        "pickle",
        "io",
        "mmap",
        "socket",
        "hub",
        "load",
        "save",
        "from_file",
        "serialization",
        "compile",
        "compiler",
        "ops",
        "classes",
        "library",
        "package",
        "export",
        "fx",
        "onnx",
        "multiprocessing",
        "distributed",
        "cpp_extension",
        "collect_env",
        "mtia",
        "monitor",
        "set_num_threads",
        "set_num_interop_threads",
        "format_map",
        "ctypeslib",
        "f2py",
        "fromfile",
        "tofile",
        "memmap",
        # they evaluate a string (an annotation held as text, a forward reference)
        "get_type_hints",
        "ForwardRef",
        "singledispatch",
        "singledispatchmethod",
        # it walks attributes by the names a template holds, as str.format_map does
        "Formatter",
        # it makes a class from a namespace dict: three-argument type() by another name
        "make_dataclass",
    }
)
BLOCKED_ATTRIBUTE_PREFIXES = ("f_", "tb_", "gi_", "cr_", "ag_", "co_")

# Blocked attribute names that one module's member of that name may still be: a regular expression's
# compile compiles no code; torch.save and torch.load write and read a file object (an io.BytesIO),
# called directly and with their arguments checked (``policy._Checker._serialization``: no file
# names, and no unpickling of arbitrary classes: torch.load's weights_only stays True, its default).
MODULE_MEMBERS = {"re": frozenset({"compile"}), "torch": frozenset({"save", "load"})}
# The members of MODULE_MEMBERS that must be called where they are named, so that the gate sees the call.
CHECKED_CALLS = frozenset({"torch.save", "torch.load"})

# Flags of torch's backends that tutorials set (``torch.backends.cudnn.benchmark = True``): the only
# module attributes a snippet may change. On this CPU they change nothing a snippet shows.
SETTABLE_FLAGS = frozenset(
    {
        "torch.backends.cudnn.benchmark",
        "torch.backends.cudnn.deterministic",
        "torch.backends.cudnn.enabled",
        "torch.backends.cudnn.allow_tf32",
        "torch.backends.cuda.matmul.allow_tf32",
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    }
)

# Underscore attributes that teaching needs (the explorer shows them), and names that only say what a
# thing is called (``type(m).__name__``).
ALLOWED_UNDERSCORE_ATTRIBUTES = frozenset(
    {"_version", "_base", "_is_view", "__init__", "__version__", "__name__", "__qualname__", "__doc__",
     "__torch_function__",  # (super().__torch_function__(func, types, args, kwargs): func(*args, **kwargs))
     "_nnz", "_values", "_indices"})  # (a sparse tensor's, as the torch.sparse docs read them)
ALLOWED_UNDERSCORE_PREFIXES = ("_saved_",)
ALLOWED_UNDERSCORE_NAMES = frozenset({"_", "__name__"})
# ``m.__class__.__name__`` (DCGAN's weights_init): ``__class__`` only on the way to the class's name.
CLASS_NAME_ATTRIBUTES = frozenset({"__name__", "__qualname__"})
# Methods a snippet's own class may define.
ALLOWED_DUNDER_METHODS = frozenset(
    {
        "__init__",
        "__post_init__",
        "__del__",
        "__bool__",
        "__ne__",
        "__radd__",
        "__rsub__",
        "__rmul__",
        "__rtruediv__",
        "__rmatmul__",
        "__floordiv__",
        "__mod__",
        "__pow__",
        "__rpow__",
        "__pos__",
        "__abs__",
        "__invert__",
        "__and__",
        "__or__",
        "__xor__",
        "__iadd__",
        "__isub__",
        "__imul__",
        "__itruediv__",
        "__delitem__",
        "__reversed__",
        "__index__",
        "__int__",
        "__float__",
        "__format__",
        "__call__",
        "__len__",
        "__getitem__",
        "__setitem__",
        "__iter__",
        "__next__",
        "__repr__",
        "__str__",
        "__eq__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__contains__",
        "__add__",
        "__sub__",
        "__mul__",
        "__truediv__",
        "__matmul__",
        "__neg__",
        "__enter__",
        "__exit__",
        # numbers and containers of one's own
        "__rfloordiv__",
        "__rmod__",
        "__imatmul__",
        "__ifloordiv__",
        "__ipow__",
        "__lshift__",
        "__rshift__",
        "__round__",
        "__trunc__",
        "__floor__",
        "__ceil__",
        "__complex__",
        "__missing__",
        "__copy__",
        "__deepcopy__",
        # a class of one's own that torch functions accept (the "Extending PyTorch" notes)
        "__torch_function__",
    }
)
