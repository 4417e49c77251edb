"""The static placement rules (`migctl/core/model/placement.py`): `NodeIndex` answers exactly what `static_misfit` says
of every node, for pods that name their nodes (selectors, `In` affinity terms on labels and names) and pods that
do not, and the planner's explanation of a pinned pod still counts every node."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.core.model.cluster import Node, Pod, Requirement, Snapshot, Taint, Term, Toleration
from migctl.core.model.placement import NodeIndex, static_misfit
from migctl.core.planner import plan
from tests.unit.builders import node, vram

KEYS = ["pool", "zone", "kubernetes.io/hostname"]
VALUES = ["a", "b", "c", "n0", "n1", "n2", "n3"]
NAMES = [f"n{i}" for i in range(6)]

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
taints = st.lists(
    st.builds(
        Taint,
        st.sampled_from(["gpu", "spot"]),
        st.sampled_from(["", "yes"]),
        st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    ),
    max_size=2,
)
nodes = st.lists(st.tuples(labels, taints, st.booleans()), min_size=1, max_size=6).map(
    lambda specs: [
        Node(NAMES[i], labels=lab, taints=tuple(ts), unschedulable=cordoned)
        for i, (lab, ts, cordoned) in enumerate(specs)
    ]
)
requirement = st.builds(
    Requirement,
    st.sampled_from(KEYS),
    st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    st.lists(st.sampled_from(VALUES), max_size=3).map(tuple),
)
field = st.builds(
    Requirement,
    st.sampled_from(["metadata.name", "metadata.uid"]),
    st.sampled_from(["In", "NotIn"]),
    st.lists(st.sampled_from(NAMES), max_size=3).map(tuple),
)
terms = st.lists(
    st.builds(Term, st.lists(requirement, max_size=2).map(tuple), st.lists(field, max_size=1).map(tuple)), max_size=3
)
tolerations = st.lists(
    st.builds(
        Toleration,
        st.sampled_from(["", "gpu", "spot"]),
        st.sampled_from(["Equal", "Exists"]),
        st.sampled_from(["", "yes"]),
        st.sampled_from(["", "NoSchedule"]),
    ),
    max_size=2,
)
pods = st.builds(
    lambda sel, aff, tol: Pod(
        "ns", "p", node_selector=tuple(sorted(sel.items())), affinity=tuple(aff), tolerations=tuple(tol)
    ),
    labels,
    terms,
    tolerations,
)


@settings(max_examples=300, deadline=None)
@given(nodes, st.lists(pods, min_size=1, max_size=4))
def test_the_index_answers_what_every_node_says(ns: list[Node], ps: list[Pod]) -> None:
    index = NodeIndex(ns)
    for pod in ps:  # several pods on one index: its memo per toleration list is shared
        reasons = Counter(why for n in ns if (why := static_misfit(pod, n)) is not None)
        assert index.misfits(pod) == (reasons, [i for i, n in enumerate(ns) if static_misfit(pod, n) is None])


def test_a_pinned_pod_left_out_is_explained_over_every_node() -> None:
    """The pod names one node by hostname; that node is tainted. The reason still counts all three nodes."""
    ns = [
        node(f"n{i}", "h100-80gb", [{"7g.80gb": 1}], labels={"kubernetes.io/hostname": f"n{i}"}, taints=taints_of(i))
        for i in range(3)
    ]
    pinned = vram("p", 5, node_selector=(("kubernetes.io/hostname", "n2"),))
    (left,) = plan(Snapshot(tuple(ns), (pinned,))).unplaced
    assert left.reason == (
        "0/3 GPU nodes fit (2 nodeSelector does not match, 1 untolerated taint gpu:NoSchedule); needs 5120 MiB of VRAM"
    )


def taints_of(i: int) -> tuple[Taint, ...]:
    return (Taint("gpu", "", "NoSchedule"),) if i == 2 else ()
