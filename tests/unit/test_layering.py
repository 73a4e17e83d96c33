"""The packages stay layered (docs/ARCHITECTURE.md): no import cycle between kafkafast's modules
and no import from a lower package into a higher one. Imports anywhere in a module count
(inside functions too); those under `if TYPE_CHECKING:` do not.

What is still left of the single-node/cluster split (issue 24) is listed in `REMAINING`: the
test fails on anything else, and also when one of those is gone (then take it off the list).
`Partition` has no subclass: what differs between modes is its home's (broker/partition.py).

Imports sit at the module's top; one inside a function is a deliberate deferral (a heavy or
optional dependency, a light start of kafkafast.testing or of the command line) and says why in
a comment on its line."""
from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "kafkafast"

# Lowest first; a package may import only from its own rank or below.
LAYERS = [
    {"kafkafast", "_native", "protocol", "native", "clock", "config", "config_def"},
    {"records"},
    {"client", "storage"},
    {"security"},
    {"metrics"},
    {"broker"},
    {"runtime"},
    {"cluster"},
    {"cli"},
    {"testing"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

# Issue 24: no cycle and no upward import left (the runtime is handed its broker class by the
# command line); what else is left of the split is in docs/ARCHITECTURE.md ("Processes").
REMAINING: dict[str, set] = {
    "cycles": set(),
    "upward": set(),
}

# Function-level imports not yet moved up nor given their reason ("path:line"); none left.
LEFT_UNCOMMENTED: set[str] = set()


@functools.lru_cache(maxsize=None)  # (each test walks every module: parsed once for all)
def parse(path: Path) -> ast.Module:
    with warnings.catch_warnings():  # a docstring's escape is the module's business, not the layering's
        warnings.simplefilter("ignore")
        return ast.parse(path.read_text(encoding="utf-8"), str(path))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in ROOT.rglob("*.py") if "_generated" not in p.parts}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        tree = parse(path)
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for stmt in node.body for n in ast.walk(stmt)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in files:
                    name = name.rsplit(".", 1)[0] if "." in name else ""
                if name and name != mod:
                    deps.add(name)
        # A package's __init__ importing its own modules (or a module its package) is no cycle of design.
        graph[mod] = {d for d in deps if not (d.startswith(mod + ".") and path.name == "__init__.py")
                      and not (mod.startswith(d + ".") and files[d].name == "__init__.py")}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.add(tuple(sorted(comp)))
    return found


def package(mod: str) -> str:
    return mod.split(".")[1] if "." in mod else mod


def test_no_import_cycles_but_the_listed_ones():
    assert cycles(import_graph()) == REMAINING["cycles"]


def test_no_package_imports_from_a_higher_layer_but_the_listed_ones():
    graph = import_graph()
    unknown = {package(m) for m in graph} - set(RANK)
    assert not unknown, f"packages without a layer in LAYERS (and docs/ARCHITECTURE.md): {unknown}"
    upward: dict[tuple[str, str], list[str]] = defaultdict(list)
    for mod, deps in graph.items():
        for dep in deps:
            a, b = package(mod), package(dep)
            if RANK[a] < RANK[b]:
                upward[(a, b)].append(f"{mod} -> {dep}")
    assert set(upward) == REMAINING["upward"], dict(upward)


def subclasses_of(target: str) -> set[str]:
    """kafkafast's module-level classes deriving from the class `target` ("module.Name"), directly
    or through one another, whatever name they import it under."""
    bases: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        if "_generated" in path.parts:
            continue
        mod = module_name(path)
        tree = parse(path)
        names = {node.name: f"{mod}.{node.name}" for node in tree.body if isinstance(node, ast.ClassDef)}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases[f"{mod}.{node.name}"] = {names.get(ast.unparse(b), ast.unparse(b)) for b in node.bases}
    found = {target}
    while True:
        more = {cls for cls, of in bases.items() if of & found} - found
        if not more:
            return found - {target}
        found |= more


def test_one_partition_class_in_every_mode():
    assert subclasses_of("kafkafast.broker.partition.Partition") == set()


def class_methods(qualname: str) -> set[str]:
    """The methods the module-level class `qualname` ("module.Name") defines itself."""
    mod, name = qualname.rsplit(".", 1)
    path = ROOT.parent.joinpath(*mod.split(".")).with_suffix(".py")
    cls = next(n for n in parse(path).body if isinstance(n, ast.ClassDef) and n.name == name)
    return {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_one_view_of_partitions_and_one_lifecycle_in_every_mode():
    """The broker's view of partitions and its lifecycle hooks are `Broker`'s in every mode; what
    differs is the control plane's (its metadata image: `control.refresh`, `control.has_partition`;
    `control.on_listening`, `before_stop`, `stop`), never a subclass's."""
    view = {"refresh_topics", "get_partition", "partition_exists", "owns", "min_insync_replicas",
            "on_listening", "before_stop", "stop"}
    assert view <= class_methods("kafkafast.broker.broker.Broker")
    overrides = {cls: class_methods(cls) & view for cls in subclasses_of("kafkafast.broker.broker.Broker")}
    assert not any(overrides.values()), overrides


def test_one_broker_class_whatever_the_control_plane():
    """`Broker` is the only broker class: what makes it a ZooKeeper cluster member (its node,
    identity, start, controller requests, stores) is its control plane's, chosen by the command
    line (`cli/main.py:control_class`), never a subclass's."""
    assert not subclasses_of("kafkafast.broker.broker.Broker")
    start = {"initial_cluster_id", "load", "started", "config_for_topic"}
    assert start <= class_methods("kafkafast.broker.control.LocalControl")
    assert start <= class_methods("kafkafast.cluster.zk_control.ZkControl")


def test_controller_requests_are_the_control_planes():
    """What a broker knows of its controller (the controller epoch its requests are checked
    against, the connection to it, AlterPartition, a new registration, the controlled shutdown)
    is the ZooKeeper control plane's, not a Broker subclass's."""
    on_control = {"check_controller_epoch", "leader_and_isr", "update_metadata", "stop_replica", "alter_isr",
                  "_controller_connection", "register_again", "_reregister", "request_reregistration", "ask_controller",
                  "run_controlled_shutdown", "_wait_not_leading"}
    assert on_control <= class_methods("kafkafast.cluster.zk_control.ZkControl")
    moved = on_control | {"apply_leader_and_isr", "apply_update_metadata", "apply_stop_replica",
                          "send_alter_partition", "handle_alter_partition", "controlled_shutdown"}
    owners = {cls: class_methods(cls) & moved for cls in subclasses_of("kafkafast.broker.broker.Broker")}
    assert not any(owners.values()), owners


def test_the_stores_and_coordinators_that_differ_are_made_by_the_control_plane():
    """The dynamic configs, the follower fetchers, the share coordinator (its state store and
    group configs) and the transaction coordinator are each control plane's `make_*`, which
    `Broker` calls: no Broker subclass makes them."""
    factories = {"make_dynamic_configs", "make_fetchers", "make_share_coordinator", "make_txn_coordinator"}
    assert factories <= class_methods("kafkafast.broker.control.LocalControl")
    assert factories <= class_methods("kafkafast.cluster.zk_control.ZkControl")
    owners = {cls: class_methods(cls) & (factories | {"_make_dynamic_configs"})
              for cls in {"kafkafast.broker.broker.Broker"} | subclasses_of("kafkafast.broker.broker.Broker")}
    assert not any(owners.values()), owners


def test_a_workers_data_plane_is_one_placement_whatever_the_control_plane():
    """Where a worker's partitions live and how their replica state is kept (roles, ISR and
    leading epoch in the slot, new replicas, shared append, routing, wake-ups) is
    `WorkerPlacement`'s under either control plane, and no class subclasses it. One residence
    class: `SlotResidence`."""
    data_plane = {"become_leader", "become_follower", "on_isr_changed", "replica_removed", "new_replica",
                  "appends_here", "append", "shared_writer", "group_owner", "topic_id_of", "handle_frame",
                  "_should_wake", "_moved"}
    assert data_plane <= class_methods("kafkafast.runtime.placement.WorkerPlacement")
    assert not subclasses_of("kafkafast.runtime.placement.WorkerPlacement")
    assert not subclasses_of("kafkafast.runtime.placement.SlotResidence")


def test_one_placement_per_runtime_whatever_the_control_plane():
    """Processes are a placement, not a subclass: no placement subclasses `LocalPlacement` or
    `WorkerPlacement`; both offer the broker-shared words (the broker's identity and session,
    which ZooKeeper's `ClusterNode` keeps in them) and the wake-ups a control plane uses, and
    ZooKeeper's control plane holds the registration, the start and the controlled shutdown."""
    shared = {"new_replica", "broker_word", "set_broker_word", "poke", "add_wake_check", "process_serving"}
    assert shared <= class_methods("kafkafast.broker.placement.LocalPlacement")
    assert shared <= class_methods("kafkafast.runtime.placement.WorkerPlacement")
    assert not subclasses_of("kafkafast.broker.placement.LocalPlacement")
    assert not subclasses_of("kafkafast.cluster.node.ClusterNode")
    registration = {"before_start", "after_start", "controlled_shutdown", "request_reregistration", "make_node"}
    for cls in ("kafkafast.broker.placement.LocalPlacement", "kafkafast.runtime.placement.WorkerPlacement"):
        assert not class_methods(cls) & registration, cls
    zk_control = class_methods("kafkafast.cluster.zk_control.ZkControl")
    assert {"request_reregistration", "_reregistration_asked", "before_stop", "started"} <= zk_control


def test_the_broker_builds_its_topics_once_through_its_control_plane():
    """The broker asks its control plane for its topics and its topic store when it builds itself
    (a cluster broker builds no topics file store it then replaces), and ZooKeeper's control plane
    writes nothing onto the broker for the cluster's modules: they read its node and metadata
    cache through `broker.control`."""
    factories = {"make_topics", "make_topic_store"}
    assert factories <= class_methods("kafkafast.broker.control.LocalControl")
    assert factories <= class_methods("kafkafast.cluster.zk_control.ZkControl")
    for path in (ROOT / "cluster").glob("*.py"):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Attribute) and node.attr in ("node", "metadata", "cluster"):
                assert not ast.unparse(node.value).endswith("broker"), f"{path.name}: {ast.unparse(node)}"



def test_only_the_command_line_and_zookeepers_session_read_zookeeper_connect():
    """Which control plane a broker runs is the command line's choice (cli/main.py); the
    ZooKeeper session reads its connect string (cluster/node.py) and the test harness writes it
    (testing/). Anything else reading `zookeeper.connect` asks which mode it runs in: it asks its
    control plane instead (e.g. `shutdown_budget_s`, `cluster_id_in_log_dir`)."""
    allowed = {"kafkafast/cli/main.py", "kafkafast/cluster/node.py", "kafkafast/config.py", "kafkafast/config_def.py"}
    readers = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel in allowed or rel.startswith("kafkafast/testing/"):
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Constant) and node.value == "zookeeper.connect":
                readers.add(f"{rel}:{node.lineno}")
    assert not readers, sorted(readers)

PRAGMA = re.compile(r"noqa(:\s*[A-Z]+[0-9]+(,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?")


def reasons(source: str) -> dict[int, str]:
    """Line -> its comment's text without the linters' pragmas (`noqa: F401`, `type: ignore`)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = PRAGMA.sub("", tok.string.lstrip("#")).strip(" ()")
    return out


def unexplained_function_imports(source: str, name: str = "<source>") -> list[str]:
    """"name:line" of each import inside a function whose lines carry no comment saying why."""
    with warnings.catch_warnings():  # as in parse()
        warnings.simplefilter("ignore")
        tree = ast.parse(source, name)
    why = reasons(source)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                    not any(why.get(line) for line in range(node.lineno, node.end_lineno + 1)):
                found.append(f"{name}:{node.lineno}")
    return sorted(set(found), key=lambda s: (s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])))


def test_function_level_imports_say_why_they_are_not_at_the_top():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if "_generated" in path.parts:
            continue
        name = str(path.relative_to(ROOT.parent))
        found += unexplained_function_imports(path.read_text(encoding="utf-8"), name)
    assert set(found) - LEFT_UNCOMMENTED == set(), "move these to the module's top, or say on the line why not"
    assert LEFT_UNCOMMENTED - set(found) == set(), "done: take these off LEFT_UNCOMMENTED"


def test_an_import_in_a_function_needs_a_reason_on_its_line():
    source = ("import os\n\n"
              "def f():\n    import json\n    import zlib  # noqa: F401\n"
              "    import ctypes  # deferred: libc, only in the child\n"
              "    from a import (b,\n                   c)  # optional\n\n"
              "async def g():\n    h = lambda: __import__('x')\n    from y import z\n\n"
              "s = '# not a comment'\n")
    assert unexplained_function_imports(source) == ["<source>:4", "<source>:5", "<source>:12"]


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == {("a", "b", "c")}
