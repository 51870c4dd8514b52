"""The kubernetes cluster backend's own behaviour, against the Lease API's conformance
double (tests/lease_server.py) over real HTTPS: credentials (kubeconfig, in-cluster,
token rotation), the election's rules (409 races, takeover only after an expiry
observed on this node's clock, fences), membership, the @reboot ran-set, time
limits, which failures reject a revision, and that the token never reaches a
message.  The contract shared with etcd and the shared directory is in
test_cluster_leadership.py, test_cluster_slots.py and test_cluster_claims.py; the
double's own semantics are checked first, below."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from backends import ClusterBackend
from daemon_proc import until
from lease_server import TOKEN, LeaseServer

from cronstable.cluster.base import LeadershipError
from cronstable.cluster.factory import kube_client, make_leadership, make_slots
from cronstable.cluster.kube_api import (
    KubeClient,
    KubeConflict,
    KubeCredentials,
    KubeError,
    from_kubeconfig,
    in_cluster,
)
from cronstable.cluster.kube_leases import (
    Lease,
    Sightings,
    holding,
    member_name,
    new_lease,
    slot_lease_name,
)
from cronstable.cluster.kubernetes import KubernetesLeadership, reboot_ran
from cronstable.cluster.reboot import RebootGuard
from cronstable.config.models import ClusterKubernetes
from cronstable.store_errors import fault_of

pytestmark = [pytest.mark.timeout(60)]

TTL = 2


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client_of(server: LeaseServer, kubeconfig: Path, namespace: str, **kw: Any) -> KubeClient:
    path = server.kubeconfig(kubeconfig, **kw)
    return KubeClient(lambda: from_kubeconfig(path), namespace=namespace, timeout=2.0)


@pytest_asyncio.fixture
async def api(
    lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> AsyncIterator[KubeClient]:
    client = client_of(lease_server, tmp_path / "kubeconfig", kube_namespace)
    yield client
    await client.close()


@pytest_asyncio.fixture
async def nodes(
    lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> AsyncIterator[Callable[..., KubernetesLeadership]]:
    """Leaderships of one cluster on the shared server (not started)."""
    made: list[KubernetesLeadership] = []
    kubeconfig = lease_server.kubeconfig(tmp_path / "kubeconfig")

    def make(name: str, **kw: Any) -> KubernetesLeadership:
        client = KubeClient(
            lambda: from_kubeconfig(kubeconfig), namespace=kube_namespace, timeout=2.0
        )
        lead = KubernetesLeadership(name, ttl=TTL, client=client, **kw)
        lead.job_set_id = "set-1"
        made.append(lead)
        return lead

    yield make
    for lead in made:
        await lead.stop()


def lease(holder: str, *, renewed: str = "2001-01-01T00:00:00.000000Z", **spec: Any) -> Any:
    """A leader Lease as another client would write it."""
    body = new_lease(
        "cronstable",
        spec={"holderIdentity": holder, "leaseDurationSeconds": TTL, "renewTime": renewed} | spec,
        labels={},
        annotations={"cronstable.io/instance": "ghost-instance"},
    )
    return body


# ------------------------------------------------------------ the double itself


@pytest.mark.asyncio
async def test_the_double_keeps_the_documented_lease_semantics(api: KubeClient) -> None:
    """What the backend relies on: 404 for a missing Lease, AlreadyExists and Conflict as
    409, a new resourceVersion per write, label selectors, delete preconditions, and
    spec fields kept as data (never expired by the server)."""
    assert await api.get("x") is None
    body = new_lease(
        "x",
        spec=holding("n1", 1, transitions=0, acquired=None),
        labels={"role": "a"},
        annotations={},
    )
    made = await api.create(body)
    with pytest.raises(KubeConflict):
        await api.create(body)
    renewed = await api.replace(made, made.changed(spec={"holderIdentity": "n2"}))
    assert renewed.resource_version != made.resource_version and renewed.holder == "n2"
    with pytest.raises(KubeConflict):  # the resourceVersion read is stale now
        await api.replace(made, made.changed(spec={"holderIdentity": "n3"}))
    await api.create(new_lease("y", spec={}, labels={"role": "b"}, annotations={}))
    assert [lease.name for lease in await api.list("role=a")] == ["x"]
    assert [lease.name for lease in await api.list("role!=a")] == ["y"]
    assert sorted(lease.name for lease in await api.list("role")) == ["x", "y"]
    assert not await api.delete(made)  # stale: refused (409), nothing deleted
    await asyncio.sleep(1.2)  # the duration ran out: the server does not care
    still = await api.get("x")
    assert still is not None and still.holder == "n2"
    assert await api.delete(still)
    assert await api.get("x") is None
    with pytest.raises(KubeError) as invalid:
        await api.create(new_lease("Not_A_Name", spec={}, labels={}, annotations={}))
    assert invalid.value.status == 422


# ------------------------------------------------------------ credentials


def test_a_kubeconfig_gives_server_ca_token_and_namespace(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("CA")
    config = {
        "apiVersion": "v1",
        "current-context": "prod",
        "clusters": [
            {"name": "other", "cluster": {"server": "https://wrong:1"}},
            {
                "name": "k",
                "cluster": {"server": "https://api.k:6443/", "certificate-authority": "ca.pem"},
            },
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "tokenFile": "token",
                    "client-certificate-data": base64.b64encode(b"CERT").decode(),
                },
            }
        ],
        "contexts": [
            {"name": "prod", "context": {"cluster": "k", "user": "u", "namespace": "ops"}}
        ],
    }
    path = tmp_path / "kube" / "config"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    found = from_kubeconfig(path)
    assert found.server == "https://api.k:6443"
    assert found.namespace == "ops"
    assert found.ca_file == str(tmp_path / "kube" / "ca.pem")  # relative to the file
    assert found.token_file == str(tmp_path / "kube" / "token")
    assert found.cert_data == b"CERT"
    assert "prod" in found.source and str(path) in found.source


@pytest.mark.parametrize(
    ("user", "cluster", "says"),
    [
        ({"exec": {"command": "aws"}}, {}, "exec is not supported"),
        ({"auth-provider": {"name": "gcp"}}, {}, "auth-provider is not supported"),
        ({"username": "u", "password": "p"}, {}, "username is not supported"),
        ({}, {"insecure-skip-tls-verify": True}, "insecure-skip-tls-verify is not supported"),
        ({}, {"server": "api.k:6443"}, "is not an http(s) URL"),
        ({"client-key-data": "not base64!"}, {}, "client-key-data is not base64"),
    ],
)
def test_a_kubeconfig_it_cannot_use_is_refused_saying_why(
    tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any], says: str
) -> None:
    config = {
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://api:6443"} | cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "config"
    path.write_text(json.dumps(config))
    with pytest.raises(KubeError, match=re.escape(says)) as refused:
        from_kubeconfig(path)
    assert refused.value.fault == "refused"


def test_a_kubeconfig_that_is_missing_or_broken_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="cannot read the kubeconfig"):
        from_kubeconfig(tmp_path / "nowhere")
    (tmp_path / "bad").write_text("{[")
    with pytest.raises(KubeError, match="is not YAML"):
        from_kubeconfig(tmp_path / "bad")
    (tmp_path / "empty").write_text("clusters: []\n")
    with pytest.raises(KubeError, match="no current-context"):
        from_kubeconfig(tmp_path / "empty")
    (tmp_path / "dangling").write_text("current-context: gone\ncontexts: []\n")
    with pytest.raises(KubeError, match="no context named 'gone'"):
        from_kubeconfig(tmp_path / "dangling")


def test_in_cluster_reads_the_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_text("CA")
    (tmp_path / "namespace").write_text("ops\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    found = in_cluster(tmp_path, env)
    assert (found.server, found.namespace) == ("https://10.0.0.1:443", "ops")
    assert (found.token_file, found.ca_file) == (str(tmp_path / "token"), str(tmp_path / "ca.crt"))
    v6 = in_cluster(tmp_path, env | {"KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6.server == "https://[fd00::1]:443"
    with pytest.raises(KubeError, match="not in a Kubernetes pod"):
        in_cluster(tmp_path, {})
    (tmp_path / "token").unlink()
    with pytest.raises(KubeError, match="no service account token"):
        in_cluster(tmp_path, env)


@pytest.mark.asyncio
async def test_in_cluster_credentials_reach_the_server(
    lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    """The service account's files as a pod has them, the server from the environment."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "ca.crt").write_bytes(lease_server.tls.ca.read_bytes())
    (account / "namespace").write_text(kube_namespace)
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(lease_server.port),
    }
    client = KubeClient(lambda: in_cluster(account, env), namespace=None, timeout=2.0)
    try:
        await client.create(new_lease("probe", spec={}, labels={}, annotations={}))
        assert client.namespace == kube_namespace  # the account's, none configured
        assert lease_server.lease(kube_namespace, "probe") is not None
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_a_client_certificate_authenticates_without_a_token(
    lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    client = client_of(
        lease_server, tmp_path / "kc", kube_namespace, token=None, client_cert=True, inline_ca=True
    )
    try:
        assert await client.get("none") is None
    finally:
        await client.close()
    anonymous = client_of(lease_server, tmp_path / "anon", kube_namespace, token=None)
    try:
        with pytest.raises(KubeError, match="401") as refused:
            await anonymous.get("none")
        assert fault_of(refused.value) == "refused"
    finally:
        await anonymous.close()


@pytest.mark.asyncio
async def test_a_rotated_token_file_is_read_again(
    lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    """The kubelet swaps a projected token under the pod: the next request carries the
    new one (its file changed); a file rewritten so that it looks unchanged is read
    again after the server's 401.  The old token is refused by then."""
    token = tmp_path / "token"
    token.write_text("rotating-1")
    lease_server.tokens |= {"rotating-1"}
    client = client_of(lease_server, tmp_path / "kc", kube_namespace, token=None, token_file=token)
    try:
        assert await client.get("probe") is None
        assert client.token_reads == 1
        assert await client.get("probe") is None
        assert client.token_reads == 1  # unchanged: not read again
        # the kubelet writes the new token beside the old and swaps it in
        fresh = tmp_path / "token.new"
        fresh.write_text("rotating-2")
        os.replace(fresh, token)
        lease_server.tokens -= {"rotating-1"}
        lease_server.tokens |= {"rotating-2"}
        assert await client.get("probe") is None
        assert lease_server.seen_tokens[-1] == "rotating-2" and client.token_reads == 2
        # the same size, inode and modification time: only the 401 says it changed
        stat = token.stat()
        with token.open("r+") as out:
            out.write("rotating-3")
        os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        lease_server.tokens -= {"rotating-2"}
        lease_server.tokens |= {"rotating-3"}
        assert await client.get("probe") is None
        assert lease_server.seen_tokens[-2:] == ["rotating-2", "rotating-3"]
    finally:
        lease_server.tokens -= {"rotating-1", "rotating-2", "rotating-3"}
        await client.close()


# ------------------------------------------------------------ the election's rules


@pytest.mark.asyncio
async def test_two_contenders_for_a_free_lease_one_wins_the_other_gets_409(
    own_lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    """Both read the released Lease and replace it with the same resourceVersion: the
    API server takes the first write and answers the second 409, whose writer then
    reads who won.  (Every answer 0.1 s late keeps the two rounds in step.)"""
    server = own_lease_server
    kubeconfig = server.kubeconfig(tmp_path / "kc")
    first, second = (
        KubernetesLeadership(
            name,
            ttl=TTL,
            client=KubeClient(
                lambda: from_kubeconfig(kubeconfig), namespace=kube_namespace, timeout=2.0
            ),
        )
        for name in ("a", "b")
    )
    server.put_lease(kube_namespace, lease("", leaseTransitions=4))
    server.delay = 0.1
    try:
        seen = await asyncio.gather(first.round(), second.round())
    finally:
        await first.close()
        await second.close()
    winners = [o for o in seen if o.fence is not None]
    assert len(winners) == 1 and winners[0].fence == 5
    assert {o.leader for o in seen} == {winners[0].leader}
    assert server.conflicts == 1  # the loser's replace
    stored = server.lease(kube_namespace, "cronstable")
    assert stored is not None and stored["spec"]["leaseTransitions"] == 5


@pytest.mark.asyncio
async def test_a_lease_is_taken_over_only_once_it_stood_still_for_its_duration_here(
    nodes: Callable[..., KubernetesLeadership], lease_server: LeaseServer, kube_namespace: str
) -> None:
    """A ghost's renewTime is years old by the wall clock, and that does not count: the
    node waits leaseDurationSeconds on its own monotonic clock from when it first saw
    the Lease, and each renewal it sees starts that wait again."""
    clock = Clock()
    node = nodes("a", monotonic=clock)
    lease_server.put_lease(kube_namespace, lease("ghost", leaseTransitions=7))
    seen = await node.round()
    assert (seen.leader, seen.fence) == ("ghost", None)
    took = node.takeover_in()
    assert took is not None and 1.9 < took <= 2.0
    clock.now += 1.9
    assert (await node.round()).fence is None
    # the ghost renews: the wait starts again from here
    held = lease_server.lease(kube_namespace, "cronstable")
    assert held is not None
    held["spec"]["renewTime"] = "2001-01-01T00:00:01.000000Z"
    lease_server.put_lease(kube_namespace, held)
    clock.now += 1.9
    assert (await node.round()).leader == "ghost"
    clock.now += 1.9
    assert (await node.round()).leader == "ghost"
    clock.now += 0.2
    won = await node.round()
    assert (won.leader, won.fence) == ("a", 8)  # leaseTransitions + 1


@pytest.mark.asyncio
async def test_the_fence_grows_with_every_new_holder_and_a_release_keeps_it(
    nodes: Callable[..., KubernetesLeadership], lease_server: LeaseServer, kube_namespace: str
) -> None:
    fences = []
    for name in ("a", "b", "c", "a"):
        node = nodes(name)
        seen = await node.round()
        assert seen.fence is not None and seen.leader == name
        assert (await node.round()).fence == seen.fence  # a renewal keeps it
        fences.append(seen.fence)
        await node.release()
        held = lease_server.lease(kube_namespace, "cronstable")
        assert held is not None
        assert held["spec"]["holderIdentity"] == "" and held["spec"]["leaseDurationSeconds"] == 1
        assert held["spec"]["leaseTransitions"] == seen.fence
    assert fences == [0, 1, 2, 3]
    # released members deleted their Leases
    assert lease_server.names(kube_namespace) == ["cronstable"]


@pytest.mark.asyncio
async def test_members_are_listed_and_a_dead_one_is_dropped_and_tidied_by_the_leader(
    nodes: Callable[..., KubernetesLeadership], lease_server: LeaseServer, kube_namespace: str
) -> None:
    clock = Clock()
    leader, other = nodes("a", monotonic=clock), nodes("b.example", monotonic=clock)
    other.job_set_id = "set-2"
    await leader.round()
    await other.round()
    seen = await leader.round()
    assert [(m.name, m.job_set_id) for m in seen.members] == [
        ("a", "set-1"),
        ("b.example", "set-2"),
    ]
    dead = member_name("cronstable", "b.example")
    assert dead in lease_server.names(kube_namespace)
    clock.now += TTL + 0.1  # b stops renewing: to a, its Lease stood still for a duration
    seen = await leader.round()
    assert [m.name for m in seen.members] == ["a"]
    assert dead not in lease_server.names(kube_namespace)  # the leader deleted it
    # b comes back: its renewal finds its Lease gone and makes it again
    await other.round()
    assert [m.name for m in (await leader.round()).members] == ["a", "b.example"]


def test_lease_names_are_dns_names_and_distinct() -> None:
    assert member_name("cronstable", "n1") == "cronstable-member-n1"
    odd = member_name("cronstable", "Node_1")
    assert odd.startswith("cronstable-member-node-1-") and odd != member_name(
        "cronstable", "node-1"
    )
    assert len(member_name("c", "x" * 400)) <= 253
    slots = {slot_lease_name("cronstable", job) for job in ("A", "a", "a/b", "a b", "é" * 300)}
    assert len(slots) == 5 and all(len(name) <= 253 and name.islower() for name in slots)


def test_sightings_judge_expiry_on_the_readers_clock_only() -> None:
    sightings = Sightings()
    seen = Lease.parse(
        lease("n1", renewed="1999-01-01T00:00:00.000000Z")
        | {"metadata": {"name": "l", "resourceVersion": "1"}}
    )
    assert sightings.live(seen, 10.0, 5) and sightings.live(seen, 11.9, 5)
    assert not sightings.live(seen, 12.0, 5)  # its own leaseDurationSeconds (2), from 10.0
    renewed = Lease.parse(seen.changed() | {"metadata": {"name": "l", "resourceVersion": "2"}})
    assert sightings.live(renewed, 12.5, 5)  # a new state: the wait starts again
    free = Lease.parse(lease("") | {"metadata": {"name": "f", "resourceVersion": "1"}})
    assert not sightings.live(free, 0.0, 5)


# ------------------------------------------------------------ @reboot ran-set


@pytest.mark.asyncio
async def test_the_reboot_ran_set_survives_a_failover_and_keeps_only_this_revisions_jobs(
    nodes: Callable[..., KubernetesLeadership], lease_server: LeaseServer, kube_namespace: str
) -> None:
    first = nodes("a")
    assert (await first.round()).fence is not None
    scope = {"warm", "seed"}
    assert await first.claim_reboot("warm", "d1", scope) is None
    assert await first.claim_reboot("warm", "d1", scope) == "a"
    assert await first.claim_reboot("gone", "d9", scope | {"gone"}) is None
    await first.release()
    second = nodes("b")
    assert (await second.round()).fence is not None
    second.job_set_id = "set-2"
    # the new leader does not run a definition the old one ran ...
    assert await second.claim_reboot("warm", "d1", scope) == "a"
    # ... but does run a changed one, and the set keeps this revision's jobs only
    assert await second.claim_reboot("warm", "d2", scope) is None
    held = lease_server.lease(kube_namespace, "cronstable")
    assert held is not None
    ran = reboot_ran(Lease.parse(held))
    assert {name: entry["digest"] for name, entry in ran.items()} == {"warm": "d2"}
    assert '"jobSetId":"set-2"' in held["metadata"]["annotations"]["cronstable.io/reboot-ran"]
    with pytest.raises(LeadershipError, match="does not hold the leader Lease"):
        await first.claim_reboot("seed", "d3", scope)


@pytest.mark.asyncio
async def test_the_reboot_guard_asks_the_lease_for_leader_reboot_runs_only(
    nodes: Callable[..., KubernetesLeadership],
) -> None:
    from cronstable.config import load_snapshot
    from cronstable.ports import Launch
    from cronstable.snapshot import Snapshot

    text = (
        "jobs:\n"
        "  - {name: once, command: 'true', schedule: '@reboot', clusterPolicy: Leader}\n"
        "  - {name: every, command: 'true', schedule: '@reboot'}\n"
    )
    desired = load_snapshot(Snapshot("r1", "test", {"c.yaml": text.encode()}))
    once, every = desired.jobs["once"], desired.jobs["every"]
    node = nodes("a")
    node.start()
    await until(node.is_leader)
    now = datetime.now(UTC)
    guard = RebootGuard(
        lambda: node, lambda job: job.config.cluster_policy == "Leader", lambda: {"once"}
    )
    assert await guard.admit(Launch(once, now, 1, "reboot")) is None
    assert await guard.admit(Launch(once, now, 1, "reboot")) == "reboot_ran"
    assert await guard.admit(Launch(once, now, 1, "fire")) is None
    assert await guard.admit(Launch(every, now, 1, "reboot")) is None
    # a node that does not lead (an owner under spread) runs it as without a ran-set
    other = nodes("b")
    other.start()
    await until(lambda: other.leader() == "a")
    follower = RebootGuard(lambda: other, lambda job: True, lambda: {"once"})
    assert await follower.admit(Launch(once, now, 1, "reboot")) is None


@pytest.mark.asyncio
async def test_a_reboot_ran_set_that_cannot_be_read_follows_on_store_unavailable(
    own_lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    from cronstable.config import load_snapshot
    from cronstable.ports import Launch
    from cronstable.snapshot import Snapshot

    text = "jobs: [{name: once, command: 'true', schedule: '@reboot', clusterPolicy: Leader}]\n"
    once = load_snapshot(Snapshot("r1", "test", {"c.yaml": text.encode()})).jobs["once"]
    node = KubernetesLeadership(
        "a", ttl=TTL, client=client_of(own_lease_server, tmp_path / "kc", kube_namespace)
    )
    try:
        node.start()
        await until(node.is_leader)
        own_lease_server.fail = 503  # the API server stops answering, the lease still trusted
        now = datetime.now(UTC)
        closed = RebootGuard(
            lambda: node, lambda job: True, lambda: {"once"}, on_unavailable=lambda: "fail-closed"
        )
        assert await closed.admit(Launch(once, now, 1, "reboot")) == "leadership_unknown"
        degraded = RebootGuard(lambda: node, lambda job: True, lambda: {"once"})
        assert await degraded.admit(Launch(once, now, 1, "reboot")) is None
    finally:
        own_lease_server.fail = None
        await node.stop()


# ------------------------------------------------------------ failures


@pytest.mark.asyncio
async def test_every_request_has_a_time_limit(
    own_lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    own_lease_server.delay = 1.0
    client = client_of(own_lease_server, tmp_path / "kc", kube_namespace)
    client.timeout = 0.3
    node = KubernetesLeadership("a", ttl=TTL, client=client)
    began = time.monotonic()
    with pytest.raises(LeadershipError, match="no answer within 0.3 s") as failed:
        await node.round()
    assert time.monotonic() - began < 0.9
    assert fault_of(failed.value) == "unreachable"
    await node.close()


@pytest.mark.asyncio
async def test_what_rejects_a_revision_and_what_is_waited_for(
    own_lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    """Refused (the revision is rejected): a token not accepted, 403 for want of RBAC, a
    server certificate the CA does not sign.  Unreachable (the section waits): 5xx,
    429, a server that is not there."""

    async def fault(client: KubeClient) -> str:
        node = KubernetesLeadership("a", ttl=TTL, client=client)
        try:
            await node.check()
        except LeadershipError as exc:
            return fault_of(exc)
        finally:
            await node.close()
        return "answered"

    server = own_lease_server
    kc = tmp_path / "kc"
    assert await fault(client_of(server, kc, kube_namespace, token="wrong")) == "refused"
    server.forbidden.add(TOKEN)
    assert await fault(client_of(server, kc, kube_namespace)) == "refused"
    server.forbidden.clear()
    for code in (500, 503, 429):
        server.fail = code
        assert await fault(client_of(server, kc, kube_namespace)) == "unreachable"
    server.fail = None
    assert await fault(client_of(server, kc, kube_namespace)) == "answered"
    other = KubeCredentials(
        server=server.endpoint, source="test", ca_file=str(server.tls.other_ca), token=TOKEN
    )
    other_ca = KubeClient(lambda: other, namespace=kube_namespace, timeout=2.0)
    assert await fault(other_ca) == "refused"
    server.stop()
    assert await fault(client_of(server, kc, kube_namespace)) == "unreachable"


@pytest.mark.asyncio
async def test_the_token_never_reaches_a_message(
    own_lease_server: LeaseServer,
    tmp_path: Path,
    kube_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "s3cret-token-value-42"
    client = client_of(own_lease_server, tmp_path / "kc", kube_namespace, token=secret)
    node = KubernetesLeadership("a", ttl=TTL, client=client)
    with pytest.raises(LeadershipError) as refused:
        await node.check()
    assert "401" in str(refused.value) and "is not accepted" in str(refused.value)
    assert secret not in str(refused.value) and secret not in repr(client)
    credentials = from_kubeconfig(tmp_path / "kc")
    assert secret not in repr(credentials)
    # a server (or a proxy) that quotes the token back has it masked
    failure = client._failure(credentials, secret, "GET", "/x", 500, {"message": f"bad {secret}"})
    assert secret not in str(failure) and "<hidden>" in str(failure)
    with caplog.at_level(logging.DEBUG):
        node.start()
        await until(lambda: node.stats.renew_failures > 0)
        await node.stop()
    assert "401" in caplog.text and secret not in caplog.text


@pytest.mark.parametrize("cluster_backend", ["kubernetes"], indirect=True)
@pytest.mark.asyncio
async def test_the_factory_builds_leadership_and_slots_on_one_namespace(
    cluster_backend: ClusterBackend, lease_server: LeaseServer
) -> None:
    config = cluster_backend.config(leaseTtl=TTL)
    lead = make_leadership(config, "n1")
    slots = make_slots(config, "n1", "i1")
    try:
        await lead.check()
        await slots.check()
        assert lead.backend == slots.backend == "kubernetes"
        assert (await lead.round()).leader == "n1"
        assert (await slots.claim(["job"]))["job"].holder.fence == 1
        names = lease_server.names(cluster_backend.namespace)
        assert names == sorted(
            ["cronstable", "cronstable-member-n1", slot_lease_name("cronstable", "job")]
        )
    finally:
        await lead.stop()
        await slots.close()
    # no namespace configured, none in the kubeconfig's context: "default"
    settings = ClusterKubernetes.model_validate({"kubeconfig": str(cluster_backend.kubeconfig)})
    client = kube_client(settings, timeout=1.0)
    try:
        await client.get("cronstable")
        assert client.namespace == "default"
    finally:
        await client.close()


# ------------------------------------------------------------ two real daemons


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cluster_backend", ["kubernetes"], indirect=True)
def test_two_daemons_fail_over_after_a_kill_9_and_run_a_reboot_job_once(
    cluster_backend: ClusterBackend, tmp_path: Path
) -> None:
    """Two `cronstable run` processes on the Lease server.  One leads a per-second
    Leader job and runs the @reboot Leader job; after its kill -9 the other takes over
    once the Lease stood still for leaseTtl on its clock (one to two leaseTtl), and no
    second ran twice.  Both restarted, the one that leads finds the @reboot job in the
    leader Lease's ran-set and does not run it again (no state section: per-pod
    directories could not tell)."""
    import textwrap

    from daemon_proc import DaemonProcess, stop_all, wait_for
    from test_cluster_e2e import doubles, runs

    out, once = tmp_path / "Leader", tmp_path / "migrate.out"
    config = tmp_path / "config"
    config.mkdir()
    line = "$CRONSTABLE_NODE_NAME $CRONSTABLE_SCHEDULED_TIME"
    jobs = f"""\
        jobs:
          - name: leader
            schedule: "* * * * * * *"
            clusterPolicy: Leader
            command: echo "{line}" >> {out}
          - name: migrate
            schedule: "@reboot"
            clusterPolicy: Leader
            command: echo "$CRONSTABLE_NODE_NAME" >> {once}
        """
    (config / "cronstable.yaml").write_text(cluster_backend.yaml(TTL) + textwrap.dedent(jobs))
    nodes = {
        name: DaemonProcess(
            config,
            tmp_path / f"{name}.log",
            args=["--node-name", name],
            env=os.environ | {"CRONSTABLE_NODE_NAME": name},
        )
        for name in ("n1", "n2")
    }
    try:
        for node in nodes.values():
            node.start()
        wait_for(lambda: len(runs(out)) >= 2 and once.exists(), what="a leader and its @reboot")
        leader = runs(out)[-1][0]
        assert once.read_text().split() == [leader]
        nodes[leader].kill9()
        killed = datetime.now(UTC)
        wait_for(lambda: any(w > killed for _, w in runs(out)), timeout=5 * TTL)
        took = (min(w for _, w in runs(out) if w > killed) - killed).total_seconds()
        survivor = next(name for name in nodes if name != leader)
        assert {n for n, w in runs(out) if w > killed} == {survivor}
        assert took < 2 * TTL + 2.0, took
        print(f"\nkubernetes takeover after kill -9: {took:.2f} s")
        assert f"Cluster: node {survivor} is now the leader" in nodes[survivor].output()
        stop_all([nodes[survivor]])  # released: the Lease is free at once
        assert cluster_backend.leases is not None
        held = cluster_backend.leases.lease(cluster_backend.namespace, "cronstable")
        assert held is not None and held["spec"]["holderIdentity"] == ""
        for node in nodes.values():
            node.start()
        wait_for(
            lambda: any("@reboot already ran in the cluster" in n.output() for n in nodes.values()),
            what="the new leader finding the @reboot job's run in the Lease",
        )
        time.sleep(1.0)
    finally:
        stop_all(nodes.values(), timeout=15)
    assert once.read_text().split() == [leader]
    assert doubles(out) == []


ROLE = Path(__file__).resolve().parent.parent / "packaging/helm/cronstable/templates/role.yaml"
VERBS = {
    "GET lease": "get",
    "GET list": "list",
    "POST lease": "create",
    "PUT lease": "update",
    "DELETE lease": "delete",
}


@pytest.mark.asyncio
async def test_the_charts_role_allows_exactly_the_verbs_the_backend_uses(
    own_lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    """A whole life (join, lead, hold and release a slot, ask for a cancel, stop) on a
    server of its own: the RBAC verbs its requests need are the Helm chart Role's."""
    server = own_lease_server
    config = ClusterBackend(
        "kubernetes",
        leases=server,
        namespace=kube_namespace,
        kubeconfig=server.kubeconfig(tmp_path / "kc"),
    ).config(leaseTtl=TTL)
    a, b = make_leadership(config, "a"), make_leadership(config, "b")
    slots_a, slots_b = make_slots(config, "a", "ia"), make_slots(config, "b", "ib")
    try:
        a.start()
        await until(a.is_leader)
        b.start()
        await until(lambda: len(a.members()) == 2)
        hold = (await slots_a.claim(["j"]))["j"].holder
        await slots_b.request_cancel("j", hold)
        await slots_a.release("j", hold)
    finally:
        for lead in (b, a):
            await lead.stop()
        await slots_a.close()
        await slots_b.close()
    used = {VERBS[request] for request, count in server.requests.items() if count}
    match = re.search(r"verbs:\s*\[([^\]]*)\]", ROLE.read_text())
    assert match is not None
    allowed = {verb.strip().strip('"') for verb in match[1].split(",")}
    assert used == allowed == {"get", "list", "create", "update", "delete"}


@pytest.mark.asyncio
async def test_the_cluster_section_rejects_a_refused_token_at_its_key_and_leads_with_a_good_one(
    lease_server: LeaseServer, tmp_path: Path, kube_namespace: str
) -> None:
    from cronstable.cluster.section import ClusterSection
    from cronstable.config import ConfigError, MemoryTree, load
    from cronstable.web import encode

    def revision(kubeconfig: Path) -> Any:
        text = (
            "cluster:\n  backend: kubernetes\n  leaseTtl: 2\n  kubernetes:\n"
            f"    namespace: {kube_namespace}\n    kubeconfig: {kubeconfig}\n"
            "jobs: [{name: lead, command: 'true', schedule: '@hourly', clusterPolicy: Leader}]\n"
        )
        return load(MemoryTree({"c.yaml": text.encode()}), "c.yaml")

    section = ClusterSection("n1")
    secret = "not-the-token-1f2e"
    wrong = lease_server.kubeconfig(tmp_path / "wrong", token=secret)
    with pytest.raises(ConfigError) as caught:
        await section.prepare(revision(wrong))
    [problem] = caught.value.problems
    assert (problem.line, problem.key) == (6, ("cluster", "kubernetes", "kubeconfig"))
    assert "is not accepted" in problem.message and secret not in problem.message
    state = revision(lease_server.kubeconfig(tmp_path / "right"))
    section.commit(await section.prepare(state), state)
    try:
        await until(lambda: section.allows(state.jobs["lead"]) is None)
        view = encode.cluster(section.view())
        assert (view["backend"], view["role"], view["leader"]) == ("kubernetes", "leader", "n1")
        assert [m["name"] for m in view["members"]] == ["n1"]
    finally:
        await section.close()
