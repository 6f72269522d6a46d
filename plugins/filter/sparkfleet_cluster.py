# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters for spark_cluster and `sparkfleet cluster verify`: the inventory's clusters, each node's part in
them, and the verdict. The logic is module_utils/cluster.py; these convert at the edge (Ansible's errors,
hostvars). (ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _model as cluster_model
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _nccl as cluster_nccl
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _verdict as cluster_verdict
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._validate import host_name

# An OpenSSH public key line: its type, its base64 body, an optional comment.
PUBLIC_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)) [A-Za-z0-9+/]+={0,3}(?: [^\n]*)?$")


def spark_cluster_model(clusters: object, hosts: list) -> list[dict]:
    """spark_clusters checked against the inventory's hosts and made complete (each node's rail addresses)."""
    try:
        model = cluster_model.validate(clusters, [str(h) for h in hosts or []])
    except cluster_model.ClusterError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    for entry in model:
        for node in entry["nodes"]:
            if host_name(node):
                raise AnsibleFilterError(f"spark_clusters: {entry['name']}.nodes: {node!r} {host_name(node)}")
    return model


def spark_cluster_node_plan(model: list[dict], host: str) -> dict | None:
    """This node's plan (its rails with their addresses, its peers), or None when it is in no cluster."""
    found = cluster_model.cluster_of(model or [], str(host))
    return cluster_model.node_plan(found, str(host)) if found else None


def _fact(hostvars, node: str, name: str):
    """A node's fact from hostvars, None when the node or the fact is not there."""
    return (hostvars.get(node) or {}).get(name)


def _peer_value(hostvars, peer: str, fact: str, what: str, cluster_name: str):
    value = _fact(hostvars, peer, fact)
    if value is None:
        raise AnsibleFilterError(f"{peer}'s {what} is not known in this run, so its peers cannot be given it; run "
                                 f"every node of cluster {cluster_name} together (without a --limit that leaves "
                                 f"{peer} out)")
    return value


def _peer_keys(model: list[dict], host: str, hostvars, fact: str, what: str, check_mode: bool):
    """(cluster, peer, key) for each of the node's peers, the key its fact holds, checked to be an OpenSSH public
    key. In check mode a peer whose key is not there yet (made or read by this run) is left out."""
    found = cluster_model.cluster_of(model or [], str(host))
    for peer in found["nodes"] if found else []:
        if peer == str(host) or (check_mode and _fact(hostvars, peer, fact) is None):
            continue
        key = str(_peer_value(hostvars, peer, fact, what, found["name"])).strip()
        if not PUBLIC_KEY.fullmatch(key):
            raise AnsibleFilterError(f"{peer}'s {what} is {key[:60]!r}...; expected an OpenSSH public key line")
        yield found, peer, key.split(" ")[:2]


def spark_cluster_authorized_keys(model: list[dict], host: str, hostvars, check_mode: bool = False) -> str:
    """The peers' public keys (fact spark_cluster_public_key of each), one a line, for the cluster user's
    authorized_keys. In check mode a peer whose key is not made yet is left out."""
    return "\n".join(f"{kind} {body} sparkfleet cluster {found['name']}: {peer}" for found, peer, (kind, body)
                     in _peer_keys(model, host, hostvars, "spark_cluster_public_key", "public key", check_mode))


def spark_cluster_known_hosts(model: list[dict], host: str, hostvars, check_mode: bool = False) -> str:
    """The peers' host keys (fact spark_cluster_host_key of each, read from the peer itself through Ansible, never
    taken from the network), one line a peer, under its inventory name and its static rail addresses."""
    return "\n".join(",".join([peer] + [a.split("/")[0] for a in found["addresses"][peer] if a]) + f" {kind} {body}"
                     for found, peer, (kind, body)
                     in _peer_keys(model, host, hostvars, "spark_cluster_host_key", "host key", check_mode))


def spark_cluster_measure_args(model: list[dict], host: str, hostvars) -> dict:
    """spark_cluster_measure's arguments for this node: its index, its rails (address without prefix, the one
    it has where link-local; its IPv6 link-local address, which a link-local rail is measured over) and its
    peers (likewise), from each node's fact spark_cluster_facts."""
    found = cluster_model.cluster_of(model or [], str(host))
    if not found:
        raise AnsibleFilterError(f"{host} is in no cluster of spark_clusters")

    def addresses(node: str) -> list[str | None]:
        facts = _fact(hostvars, node, "spark_cluster_facts") or {}
        out = []
        for index, rail in enumerate(found["rails"]):
            planned = found["addresses"][node][index]
            if planned:
                out.append(planned.split("/")[0])
                continue
            have = ((facts.get("interfaces") or {}).get(rail["interface"]) or {}).get("addresses") or []
            local = [a.split("/")[0] for a in have if a.startswith("169.254.")]
            out.append(local[0] if local else None)
        return out

    def addresses6(node: str) -> list[str | None]:
        interfaces = (_fact(hostvars, node, "spark_cluster_facts") or {}).get("interfaces") or {}
        return [((interfaces.get(rail["interface"]) or {}).get("link_local6") or [None])[0]
                for rail in found["rails"]]

    mine, mine6 = addresses(str(host)), addresses6(str(host))
    link_local = [not found["addresses"][str(host)][i] for i in range(len(found["rails"]))]
    return {"node_index": found["nodes"].index(str(host)), "mtu": found["mtu"], "user": found["user"],
            "rails": [{"interface": r["interface"], "hca": r["hca"], "address": mine[i], "link_local": link_local[i],
                       "address6": mine6[i]} for i, r in enumerate(found["rails"])],
            "peers": [{"name": n, "index": i, "addresses": addresses(n), "addresses6": addresses6(n)}
                      for i, n in enumerate(found["nodes"]) if n != str(host)]}


def spark_cluster_nccl_args(model: list[dict], host: str, hostvars, cap_bytes: int, headroom: float) -> dict:
    """spark_cluster_nccl's arguments for this node, or {'skip': why} when NCCL cannot run on the cluster (a node
    without a GPU, rank 0 without an address, too little memory for even 64 MiB)."""
    found = cluster_model.cluster_of(model or [], str(host))
    if not found:
        raise AnsibleFilterError(f"{host} is in no cluster of spark_clusters")
    facts = {n: _fact(hostvars, n, "spark_cluster_facts") or {} for n in found["nodes"]}
    without = [n for n in found["nodes"] if not facts[n].get("gpu")]
    if without:
        return {"skip": f"no GPU answers nvidia-smi on {', '.join(without)}"}
    master = spark_cluster_measure_args(model, found["nodes"][0], hostvars)["rails"][0]["address"]
    if not master:
        return {"skip": f"{found['nodes'][0]} has no address on {found['rails'][0]['interface']}"}
    available = min((facts[n].get("meminfo") or {}).get("MemAvailable") or 0 for n in found["nodes"])
    size = cluster_nccl.nccl_bytes(available, len(found["nodes"]), int(cap_bytes), float(headroom))
    if not size:
        return {"skip": f"the memory available ({available // 1024} MiB on the tightest node) cannot hold even a "
                        "64 MiB all_gather within the headroom"}
    return {"rank": found["nodes"].index(str(host)), "ranks": len(found["nodes"]), "master": master,
            "bytes": size, "environment": cluster_nccl.nccl_environment(
                cluster_model.node_plan(found, str(host)), facts[str(host)].get("rdma") or [])}


def spark_cluster_verdict(model: list[dict], hostvars, thresholds: dict) -> list[dict]:
    """Each cluster's verdict from its nodes' facts spark_cluster_facts, spark_cluster_measures and
    spark_cluster_nccl (rank 0's), against the thresholds (each with its source)."""
    verdicts = []
    for entry in model or []:
        facts = {n: _fact(hostvars, n, "spark_cluster_facts") or {} for n in entry["nodes"]}
        measures = {n: _fact(hostvars, n, "spark_cluster_measures") or [] for n in entry["nodes"]}
        nccl = _fact(hostvars, entry["nodes"][0], "spark_cluster_nccl")
        verdicts.append(cluster_verdict.judge(entry, facts, measures, nccl, (thresholds or {}).get("thresholds") or {}))
    return verdicts


def spark_cluster_table(verdicts: list[dict]) -> list[str]:
    """The verdicts as lines: each cluster's verdict, each check that failed (its cause and the fix), each that did
    not run or was not judged (why), then the bandwidths measured."""
    return cluster_verdict.verdict_lines(verdicts)


class FilterModule:
    def filters(self):
        return {"spark_cluster_model": spark_cluster_model, "spark_cluster_node_plan": spark_cluster_node_plan,
                "spark_cluster_authorized_keys": spark_cluster_authorized_keys,
                "spark_cluster_known_hosts": spark_cluster_known_hosts,
                "spark_cluster_measure_args": spark_cluster_measure_args,
                "spark_cluster_nccl_args": spark_cluster_nccl_args,
                "spark_cluster_verdict": spark_cluster_verdict, "spark_cluster_table": spark_cluster_table}
