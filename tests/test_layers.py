"""The package's shape: imports point downward only (lazy ones included), the core never
imports its observers, and the device contract stays small and backend-neutral."""

import ast
import inspect
import re
from pathlib import Path

import ascentrt
from ascentrt.backends import base

PKG = Path(ascentrt.__file__).parent

# Layers, lowest first: a module may import its own layer and the layers below it.
LAYERS = [
    ("backends", {"ascentrt.backends", "ascentrt.forksafe"}),  # (forksafe imports nothing)
    ("base", {"ascentrt.errors", "ascentrt.handles", "ascentrt.config", "ascentrt.accel", "ascentrt.validate", "ascentrt.kernels", "ascentrt.units",
              "ascentrt.callsite", "ascentrt.interrupts"}),
    ("memory", {"ascentrt.memory"}),
    ("engine", {"ascentrt.engine"}),
    ("runtime", {"ascentrt.device", "ascentrt.stream", "ascentrt.event", "ascentrt.notify",
                 "ascentrt.launch", "ascentrt.copies", "ascentrt.callback", "ascentrt.context",
                 "ascentrt.hccl"}),
    ("observers", {"ascentrt.graph", "ascentrt.profiler", "ascentrt.sanitizer", "ascentrt.usage"}),
    ("facades", {"ascentrt.acl", "ascentrt.cli", "ascentrt.demo", "ascentrt.sim", "ascentrt.whatif", "ascentrt.calibrate",
                 "ascentrt"}),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = ["ascentrt", *path.relative_to(PKG).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Package modules `name` imports anywhere (top level, functions, TYPE_CHECKING blocks)."""
    base_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base_parts[:len(base_parts) - node.level + 1] + ([mod] if mod else []))
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    assert best is not None, f"{name} is in no layer of this test: add it to LAYERS"
    return best[0]


def test_the_package_has_no_import_cycle():
    # Tarjan's strongly connected components over every import, lazy ones included.
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert cycles == []


def test_imports_point_downward_through_the_layers():
    upward = [f"{a} ({LAYERS[_layer(a)][0]}) imports {b} ({LAYERS[_layer(b)][0]})"
              for a, targets in GRAPH.items() for b in targets if _layer(b) > _layer(a)]
    assert upward == []


def test_the_core_never_imports_an_observer():
    observers = LAYERS[5][1]
    core = [m for m in GRAPH if _layer(m) < 5]
    hits = [(m, t) for m in core for t in GRAPH[m] if any(t == o or t.startswith(o + ".") for o in observers)]
    assert hits == []


def test_the_device_contract_is_at_most_ten_backend_neutral_methods():
    methods = sorted(base.Backend.__abstractmethods__)
    assert len(methods) <= 10
    for name in methods:
        doc = inspect.getdoc(getattr(base.Backend, name))
        assert doc and "\n" not in doc, f"{name} needs a one-line meaning"
    tree = ast.parse((PKG / "backends" / "base.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & {"numpy", "np", "Stream", "Device", "Task"}


def test_backends_import_nothing_above_them():
    for name, targets in GRAPH.items():
        if name.startswith("ascentrt.backends"):
            assert all(t.startswith("ascentrt.backends") or t == "ascentrt.forksafe"
                       for t in targets), (name, targets)


# Locks made other than through ascentrt.forksafe, each with why a forked child never takes it.
# A new one anywhere else fails the test below: a fork while another thread held it would leave
# the child's first call that takes it waiting for ever.
LOCKS_OUTSIDE_FORKSAFE = {
    ("ascentrt.forksafe", "_keep"): "its own (made at import, renewed by its hook)",
    ("ascentrt.forksafe", "lock"): "made here", ("ascentrt.forksafe", "rlock"): "made here",
    ("ascentrt.forksafe", "condition"): "made here", ("ascentrt.forksafe", "event"): "made here",
    ("ascentrt.forksafe", "_after_fork_in_child"): "its own, renewed",
    ("ascentrt.forksafe", "<module>"): "its own, renewed in the child",
    ("ascentrt.engine.scheduler", "_worker"): "an executor's parking lock: the child has none "
                                              "of the parent's executors (the engine drops them)",
    ("ascentrt.backends.cpu", "new_signal"): "one host wait's signal: a child drops the waits "
                                             "of the parent's threads",
    ("ascentrt.backends.sim", "new_signal"): "one host wait's signal (as cpu's)",
    ("ascentrt.backends.sim", "_host_moves"): "one synchronous copy's signal, on the "
                                                   "calling thread's stack",
    ("ascentrt.callback", "__init__"): "a queued callback's signal: the report thread that sets "
                                      "it is the parent's",
}
_LOCK_MAKERS = {"Lock", "RLock", "Condition", "Event", "Semaphore", "BoundedSemaphore",
                "Barrier", "allocate_lock"}


def test_every_lock_is_made_through_forksafe():
    found = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and node.module in ("threading", "_thread") for a in node.names}
        scopes = [(node, "<module>") for node in tree.body]
        while scopes:
            node, scope = scopes.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope = node.name
            if isinstance(node, ast.Call):
                fn = node.func
                made = fn.attr if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) \
                    and fn.value.id in ("threading", "_threading", "_thread") else \
                    fn.id if isinstance(fn, ast.Name) and fn.id in imported else None
                if made in _LOCK_MAKERS:
                    found.setdefault((name, scope), []).append(f"{path.relative_to(PKG)}:{node.lineno}")
            scopes.extend((child, scope) for child in ast.iter_child_nodes(node))
    unexplained = {k: v for k, v in found.items() if k not in LOCKS_OUTSIDE_FORKSAFE}
    assert unexplained == {}, "make these with ascentrt.forksafe (or say in LOCKS_OUTSIDE_FORKSAFE why a child never takes them)"


def test_task_paths_take_time_and_move_bytes_only_through_the_backend():
    # The engine, the memory layer and the runtime objects: no clock, copy or fill of their own.
    pattern = re.compile(r"perf_counter|monotonic|np\.copyto|\.fill\(|ctypes\.memmove|time\.time\(")
    offenders = []
    # hccl.mpi and hccl.join wait for other processes, in real seconds whatever the backend:
    # their timeouts (HCCL_EXEC_TIMEOUT, HCCL_CONNECT_TIMEOUT) read the real clock; they move
    # no device bytes.
    real_time = {"ascentrt.kernels", "ascentrt.hccl.mpi", "ascentrt.hccl.join"}
    for name, path in MODULES.items():
        if _layer(name) in (2, 3, 4) and name not in real_time:
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line.split("#")[0]):
                    offenders.append(f"{path.relative_to(PKG)}:{i}: {line.strip()}")
    assert offenders == []


def test_thread_local_state_declares_its_defaults():
    # Reading an unset attribute of a bare threading.local raises and catches AttributeError
    # (~0.5 us: it was most of a malloc's cost). A subclass with class defaults reads in ~40 ns.
    offenders = [f"{path.relative_to(PKG)}:{i}: {line.strip()}"
                 for path in MODULES.values()
                 for i, line in enumerate(path.read_text().splitlines(), 1)
                 if "threading.local()" in line.split("#")[0]]
    assert offenders == []


# Functions that import when called, each run once or off the hot paths (an import statement
# costs a call ~0.5 us: `ascentrt.free` once paid that on every free). A new one must say why.
LAZY_IMPORTS_ALLOWED = {
    ("ascentrt", "_sanitize_from_env"), ("ascentrt", "_profile_from_env"),   # at import
    ("ascentrt", "_warn_unknown_settings"), ("ascentrt.config", "unknown_settings"),  # at import
    ("ascentrt", "_refuse"),                                                 # a setting refused
    ("ascentrt.acl", "_teardown"), ("ascentrt.acl", "get_cann_version"),     # finalize, rare
    ("ascentrt.acl._api", "_tables"), ("ascentrt.acl._api", "sweep"),        # once; on resets
    ("ascentrt.backends.sim", "_pump"),                                      # once per thread
    ("ascentrt.context", "retain_primary"), ("ascentrt.context", "release_primary"),
    ("ascentrt.context", "__init__"),                                        # set/reset device
    ("ascentrt.errors", "warn_at_caller"),                                   # warnings only
    ("ascentrt.graph.schedule", "run"),                                      # once per run
    ("ascentrt.graph.taskgraph", "__init__"), ("ascentrt.graph.taskgraph", "add_kernel"),
    ("ascentrt.graph.taskgraph", "schedule"), ("ascentrt.graph.taskgraph", "to_json"),
    ("ascentrt.graph.taskgraph", "to_dot"),                                  # once per drawing
    ("ascentrt.profiler.hostapi", "_probe_device_sync"), ("ascentrt.profiler.ranges", "__call__"),
    ("ascentrt.profiler.recorder", "start"), ("ascentrt.profiler.session", "start_from_env"),
    ("ascentrt.profiler.session", "_after_fork_in_child"),
    ("ascentrt.profiler.session", "_stop_at_multiprocessing_exit"),
    ("ascentrt.profiler.summary", "_switch_note"), ("ascentrt.profiler.summary", "print_summary"),
    ("ascentrt.memory.host", "host_pool"),                                   # once
    ("ascentrt.hccl.mpi", "_mpi"),                                           # once (optional extra)
    ("ascentrt.profiler.ranges", "mark"), ("ascentrt.profiler.ranges", "__init__"),  # on errors
    ("ascentrt.profiler.recorder", "_api_error"),                            # on errors
    ("ascentrt.context", "set_current_context"),  # device imports context: a context switch pays it
    # (what most processes never use, off `import ascentrt`, which every process pays: the
    # test suite starts about a thousand interpreters)
    ("ascentrt.profiler", "__getattr__"),                                    # once per name
    ("ascentrt", "__getattr__"),                                             # ascentrt.hccl
    ("ascentrt.profiler.profile", "diagnose"), ("ascentrt.profiler.profile", "metrics"),
    ("ascentrt.profiler.profile", "save"),                                   # once per profile
    ("ascentrt.profiler.session", "__init__"), ("ascentrt.profiler.session", "start"),
    ("ascentrt.profiler.session", "stop"), ("ascentrt.profiler.session", "_report_progress"),
    ("ascentrt.profiler.session", "_note_uncaught_exceptions"),              # once per session
    ("ascentrt.profiler.session", "_stop_at_exit"),                          # once, at exit
    ("ascentrt.accel", "build"), ("ascentrt.accel", "_docstrings"),          # make accel
    ("ascentrt.validate", "start_program"), ("ascentrt.validate", "wait_program"),  # commands
}
COMMAND_MODULES = {"ascentrt.cli", "ascentrt.demo", "ascentrt.calibrate", "ascentrt.whatif"}


def test_no_function_imports_on_call_paths():
    found = set()
    for name, path in MODULES.items():
        if name in COMMAND_MODULES:
            continue  # commands run once per process
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in _own_nodes(fn)):
                    found.add((name, fn.name))
    assert found - LAZY_IMPORTS_ALLOWED == set(), "import at module level, or say why here"


def _own_nodes(fn: ast.AST):
    """The statements and expressions of a function, nested blocks included, not those of the
    functions and classes defined inside it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


# What `import ascentrt` leaves out: every process pays its import (the test suite starts about
# a thousand), and these serve only the processes that analyse or write a profile, run a
# collective or start a program.
IMPORTED_ON_USE = ("ascentrt.profiler", "ascentrt.profiler.data", "ascentrt.profiler.analysis",
                   "ascentrt.profiler.export", "ascentrt.profiler.recorder",
                   "ascentrt.profiler.folders", "ascentrt.hccl", "subprocess")


def test_import_leaves_out_what_only_profiling_and_commands_use_and_the_names_stay_functions():
    import subprocess
    import sys
    code = ("import sys, ascentrt as art\n"
            f"print(sorted(m for m in {IMPORTED_ON_USE!r} if m in sys.modules))\n"
            "print({'hccl', 'profile', 'profiler'} <= set(dir(art)))\n"
            "print(art.hccl.all_reduce is sys.modules['ascentrt.hccl'].all_reduce)\n"
            "with art.profile(None) as prof:\n"
            "    art.synchronize()\n"
            "from ascentrt.profiler import session\n"
            "print(art.profiler.profile is art.profile is session.profile,\n"
            "      art.profiler.metrics(prof.profile) == prof.metrics(),\n"
            "      art.profiler.diagnose(prof.profile) == prof.diagnose())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["[]", "True", "True", "True True True"], out.stdout
