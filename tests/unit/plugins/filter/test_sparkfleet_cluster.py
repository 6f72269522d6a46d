"""A Spark cluster's model, the tools' outputs read back, and the verdict, on the recordings of
tests/fixtures/cluster (its README says which are recorded on the lab and which stand for the hardware)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_cluster import spark_cluster_measure_args
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _model as cluster_model
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _nccl as cluster_nccl
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _netplan as cluster_netplan
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _tools as cluster_tools
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _verdict as cluster_verdict

from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "cluster"
HOSTS = ["spark-01", "spark-02", "spark-03"]
RAILS = [{"interface": "enp1s0f1np1", "hca": "rocep1s0f1", "subnet": "192.168.100.0/24"},
         {"interface": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "subnet": "192.168.101.0/24"}]
PAIR = {"name": "pair", "nodes": ["spark-01", "spark-02"], "user": "nvidia", "rails": RAILS}
THRESHOLDS = __import__("yaml").safe_load(
    (REPO / "matrix" / "cluster-thresholds.yml").read_text())["thresholds"]


def recording(name: str) -> str:
    return (FIXTURES / name).read_text()


def model(**changes) -> dict:
    return cluster_model.validate([{**copy.deepcopy(PAIR), **changes}], HOSTS)[0]


def test_a_pair_gets_an_address_on_each_rail_from_its_host_number():
    pair = model()
    assert pair["addresses"] == {"spark-01": ["192.168.100.10/24", "192.168.101.10/24"],
                                 "spark-02": ["192.168.100.11/24", "192.168.101.11/24"]}
    assert (pair["mtu"], pair["addressing"]) == (9000, "static")
    assert model(host_ids={"spark-01": 1, "spark-02": 2})["addresses"]["spark-02"] == [
        "192.168.100.2/24", "192.168.101.2/24"]
    linked = model(addressing="link-local", rails=[{k: v for k, v in r.items() if k != "subnet"} for r in RAILS])
    assert linked["addresses"]["spark-01"] == [None, None]


@pytest.mark.parametrize(("change", "said"), [
    ({"nodes": ["spark-01", "spark-09"]}, "pair.nodes is 'spark-09'; expected a host of the inventory"),
    ({"nodes": ["spark-01"]}, "pair.nodes is ['spark-01']; expected two or more different inventory hosts"),
    ({"user": "Nvidia;rm"}, "pair.user is 'Nvidia;rm'; expected the login user every node has"),
    ({"mtu": 90000}, "pair.mtu is 90000; expected a whole number from 1280 to 9216"),
    ({"addressing": "dhcp"}, "pair.addressing is 'dhcp'; expected static or link-local"),
    ({"rails": [{**RAILS[0], "interface": "enp1s0f1np1-too-long"}]},
     "pair.rails[0].interface is 'enp1s0f1np1-too-long'; expected a network interface name (15 characters"),
    ({"rails": [RAILS[0], {**RAILS[1], "subnet": "192.168.100.128/25"}]},
     "pair.rails[1].subnet is '192.168.100.128/25'; expected a subnet of its own (it overlaps 192.168.100.0/24"),
    ({"rails": [RAILS[0], {**RAILS[1], "interface": "enp1s0f1np1"}]},
     "pair.rails[1].interface is 'enp1s0f1np1'; expected an interface used by one rail only"),
    ({"rails": [{**RAILS[0], "subnet": "192.168.100.7/24"}]},
     "pair.rails[0].subnet is '192.168.100.7/24'; expected an IPv4 network"),
    ({"host_ids": {"spark-01": 10, "spark-02": 300}}, "pair.host_ids.spark-02 is 300; expected a host number inside"),
    ({"host_ids": {"spark-01": 10, "spark-02": 10}}, "expected a different host number for each node"),
    ({"addressing": "link-local"}, "pair.rails[0].subnet is '192.168.100.0/24'; expected no subnet with link-local"),
    ({"rails": [{**RAILS[0], "hca": "mlx5 0"}]}, "pair.rails[0].hca is 'mlx5 0'; expected the RDMA device"),
    ({"bandwidth": 1}, "pair is ['bandwidth']; expected only name, nodes, user"),
])
def test_a_wrong_cluster_is_refused_naming_the_field_what_was_found_and_what_is_expected(change, said):
    with pytest.raises(cluster_model.ClusterError) as raised:
        model(**change)
    assert said in str(raised.value)
    assert str(raised.value).endswith("Fix spark_clusters in your inventory's group_vars.")


def test_a_node_in_two_clusters_and_a_name_used_twice_are_refused():
    other = {**PAIR, "name": "trio", "nodes": ["spark-02", "spark-03"]}
    with pytest.raises(cluster_model.ClusterError, match=r"a node in one cluster only \(it is in pair too\)"):
        cluster_model.validate([PAIR, other], HOSTS)
    with pytest.raises(cluster_model.ClusterError, match="expected a name used once"):
        cluster_model.validate([PAIR, {**PAIR, "nodes": ["spark-03", "spark-01"]}], HOSTS)
    assert cluster_model.validate(None, HOSTS) == [] == cluster_model.validate([], HOSTS)


def test_the_netplan_is_nvidias_file_for_the_rails_alone():
    plan = cluster_model.node_plan(model(), "spark-02")
    assert plan["peers"] == [{"name": "spark-01", "addresses": ["192.168.100.10", "192.168.101.10"]}]
    assert cluster_netplan.render_netplan(plan) == (
        "# Written by sparkfleet (role spark_cluster) for cluster pair: the CX-7 rails only.\n"
        "# Edit spark_clusters in the inventory instead; the next run rewrites this file.\n"
        "network:\n  version: 2\n  ethernets:\n"
        "    enp1s0f1np1:\n      dhcp4: false\n      dhcp6: false\n      link-local: [ipv6]\n"
        "      addresses: [192.168.100.11/24]\n      mtu: 9000\n"
        "    enP2p1s0f1np1:\n      dhcp4: false\n      dhcp6: false\n      link-local: [ipv6]\n"
        "      addresses: [192.168.101.11/24]\n      mtu: 9000\n")
    linked = cluster_model.node_plan(model(addressing="link-local", rails=[{"interface": "enp1s0f1np1"}]), "spark-01")
    assert "      link-local: [ipv4, ipv6]\n      mtu: 9000\n" in cluster_netplan.render_netplan(linked)
    assert "addresses" not in cluster_netplan.render_netplan(linked)


def test_rails_that_drifted_from_the_file_show_as_they_are_now_against_it():
    import difflib

    plan = cluster_model.node_plan(model(), "spark-02")
    links = {"enp1s0f1np1": {"mtu": 9000, "addr_info": [{"family": "inet", "local": "192.168.100.11", "prefixlen": 24},
                                                        {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
             "enP2p1s0f1np1": {"mtu": 1500, "addr_info": []}}
    now = cluster_netplan.render_netplan(cluster_netplan.as_they_are(plan, links))
    diff = [line for line in difflib.unified_diff(now.splitlines(),
                                                  cluster_netplan.render_netplan(plan).splitlines(), lineterm="")
            if line[:1] in "+-" and line[:3] not in ("---", "+++")]
    assert diff == ["-      addresses: []", "-      mtu: 1500", "+      addresses: [192.168.101.11/24]",
                    "+      mtu: 9000"]


def test_a_plan_that_would_touch_the_management_link_is_refused():
    plan = cluster_model.node_plan(model(), "spark-01")
    assert cluster_netplan.management_clash(plan, "enP7s7", ["10.0.0.5"]) is None
    assert "carries this node's default route" in cluster_netplan.management_clash(plan, "enp1s0f1np1", [])
    assert "is the address Ansible reaches this node at" in cluster_netplan.management_clash(plan, None,
                                                                                             ["192.168.100.10"])
    held = {"enp1s0f1np1": ["10.0.0.5/24"], "enP2p1s0f1np1": []}
    assert cluster_netplan.management_clash(plan, "enP7s7", ["10.0.0.5"], held).startswith(
        "rail interface enp1s0f1np1 holds 10.0.0.5/24, the address Ansible reaches this node at")
    assert cluster_netplan.management_clash(plan, "enP7s7", ["spark-01.lab"], held) is None


@pytest.mark.parametrize("bad", [
    {"cluster": "pair", "mtu": 9000, "rails": [{"interface": "eth0;reboot", "address": None}]},
    {"cluster": "pair", "mtu": 9000, "rails": [{"interface": "eth0", "address": "10.0.0.1/24\nmtu: 1"}]},
    {"cluster": "pair", "mtu": 9000, "rails": [{"interface": "eth0", "address": "10.0.0.1"}]},
    {"cluster": "Pair\n", "mtu": 9000, "rails": [{"interface": "eth0", "address": None}]},
    {"cluster": "pair", "mtu": "9000", "rails": [{"interface": "eth0", "address": None}]},
    {"cluster": "pair", "mtu": 9000, "rails": []},
])
def test_a_plan_a_module_is_handed_is_checked_again_before_it_reaches_a_file(bad):
    assert cluster_model.check_plan(bad)
    assert cluster_model.check_plan(cluster_model.node_plan(model(), "spark-01")) is None


INJECTED = "9000\n    eth9:\n      addresses: [203.0.113.9/24]\n      routes: [{to: default, via: 203.0.113.1}]"


@pytest.mark.parametrize(("rail", "said"), [
    ({"interface": "eth0", "address": "10.0.0.1/24", "mtu": INJECTED}, "rail eth0's mtu is"),
    ({"interface": "eth0", "address": "10.0.0.1/24", "mtu": 65536}, "expected 1280 to 9216"),
    ({"interface": "eth0", "address": None, "addresses": ["10.0.0.1/24]\n    eth9: {dhcp4: true"]},
     "rail eth0's address is"),
    ({"interface": "eth0", "address": None, "addresses": "10.0.0.1/24"}, "expected a list"),
])
def test_a_rails_own_mtu_and_addresses_are_checked_as_render_writes_them(rail, said):
    """Issue 34, finding 8: a plan built by hand with a newline in a rail's mtu rendered another interface's
    stanza and a default route; check_plan had skipped the per-rail values render_netplan writes."""
    plan = {"cluster": "pair", "mtu": 9000, "rails": [rail]}
    assert said in (cluster_model.check_plan(plan) or "")
    good = {**rail, "mtu": 9000, "addresses": ["10.0.0.1/24"]}
    assert cluster_model.check_plan({**plan, "rails": [good]}) is None
    assert "eth9" not in cluster_netplan.render_netplan({**plan, "rails": [good]})


def test_ibdev2netdev_maps_each_rdma_device_to_its_interface():
    devices = cluster_tools.parse_ibdev2netdev(recording("ibdev2netdev.txt"))
    assert {(d["hca"], d["netdev"], d["state"]) for d in devices} >= {
        ("rocep1s0f1", "enp1s0f1np1", "Up"), ("roceP2p1s0f1", "enP2p1s0f1np1", "Up"),
        ("rocep1s0f0", "enp1s0f0np0", "Down")}
    assert cluster_tools.parse_ibdev2netdev("ibdev2netdev: command not found\n") == []


def test_ethtool_says_the_negotiated_speed_or_none():
    assert cluster_tools.parse_ethtool(recording("ethtool-cx7-200g.txt")) == {
        "speed_mbps": 200000, "duplex": "Full", "link_detected": True}
    assert cluster_tools.parse_ethtool(recording("ethtool-cx7-no-cable.txt")) == {
        "speed_mbps": None, "duplex": "Unknown", "link_detected": False}
    assert cluster_tools.parse_ethtool(recording("ethtool-veth.txt"))["speed_mbps"] == 10000


def test_ib_write_bw_in_gbits_and_in_perftests_mb():
    rail = cluster_tools.parse_ib_write_bw(recording("ib_write_bw-rail.txt"))
    assert (rail["device"], rail["link_type"], rail["mtu"], rail["bw_avg_gbps"]) == (
        "rocep1s0f1", "Ethernet", 4096, 92.58)
    slow = cluster_tools.parse_ib_write_bw(recording("ib_write_bw-mbytes.txt"))
    assert slow["bw_avg_gbps"] == round(4096.12 * 1048576 * 8 / 1e9, 2) == 34.36
    assert cluster_tools.parse_ib_write_bw("Couldn't connect to 192.168.100.11:18515\n") is None


def test_nccl_tests_tables_plain_and_under_mpirun():
    good = cluster_tools.parse_nccl_tests(recording("nccl-all_gather-23.6.txt"))
    assert [(r["size"], r["busbw"], r["in_place_busbw"]) for r in good["rows"]] == [
        (1073741824, 23.58, 23.65), (2147483648, 23.64, 23.67)]
    assert (good["avg_busbw"], good["out_of_bounds"]) == (23.6354, 0)
    assert [(r["rank"], r["host"], r["device"]) for r in good["ranks"]] == [
        (0, "spark-01", "NVIDIA GB10"), (1, "spark-02", "NVIDIA GB10")]
    slow = cluster_tools.parse_nccl_tests(recording("nccl-all_gather-3gbps.txt"))
    assert [r["busbw"] for r in slow["rows"]] == [2.99, 3.0] and slow["avg_busbw"] == 2.99711
    assert cluster_tools.parse_nccl_tests("NCCL WARN NET/IB : No device found.\n")["rows"] == []


def test_iperf3_json_and_its_errors():
    assert cluster_tools.parse_iperf3(recording("iperf3-client.json"))["received_gbps"] > 0
    assert cluster_tools.parse_iperf3(recording("iperf3-refused.json")) == {
        "error": "unable to connect to server: Connection refused"}
    assert cluster_tools.parse_iperf3("iperf3: error - unable to connect")["error"].startswith("iperf3 printed no JSON")


def test_ping_reach_jumbo_frames_and_the_ports_that_answer_on_a_cable():
    assert cluster_tools.parse_ping(recording("ping-reach.txt")) == {"sent": 3, "received": 3, "too_big": False}
    assert cluster_tools.parse_ping(recording("ping-unreachable.txt"))["received"] == 0
    assert cluster_tools.parse_ping(recording("ping-jumbo-ok.txt"))["received"] == 3
    assert cluster_tools.parse_ping(recording("ping-jumbo-local-mtu-1500.txt")) == {
        "sent": 3, "received": 0, "too_big": True}
    assert cluster_tools.parse_ping(recording("ping-jumbo-peer-mtu-1500.txt"))["received"] == 0
    assert cluster_tools.parse_ping6_responders(recording("ping6-all-nodes.txt")) == [
        "fe80::b4d0:56ff:fe69:85d2", "fe80::5846:73ff:fe93:8b0a"]


def test_meminfo_and_a_stale_nccl_conf():
    assert cluster_tools.parse_meminfo(recording("meminfo-cma0.txt")) == {
        "MemTotal": 127540736, "MemAvailable": 121387792, "CmaTotal": 0, "CmaFree": 0}
    assert cluster_tools.parse_nccl_conf(recording("nccl.conf-stale")) == {
        "NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}


def test_nccls_environment_names_both_halves_and_the_size_fits_the_memory_available():
    devices = cluster_tools.parse_ibdev2netdev(recording("ibdev2netdev.txt"))
    plan = cluster_model.node_plan(model(rails=[{**r, "hca": None} for r in RAILS]), "spark-01")
    assert cluster_nccl.nccl_environment(plan, devices) == {
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"}
    gib = 1024 ** 3
    assert cluster_nccl.nccl_bytes(121387792, 2, 2 * gib, 0.25) == 2 * gib, "plenty available: the cap"
    assert cluster_nccl.nccl_bytes(1024 * 1024, 2, 2 * gib, 0.25) == 128 * 1024 ** 2, "1 GiB available: 1/4, 2/3 of it"
    assert cluster_nccl.nccl_bytes(100 * 1024, 2, 2 * gib, 0.25) == 0, "not even 64 MiB"
    assert cluster_nccl.nccl_bytes(None, 2, 2 * gib, 0.25) == 0
    assert cluster_nccl.nccl_bytes(121387792, 2, 16 * gib, 0.9) == 4 * gib, "never the 16 GB that froze a node"


# The verdict. Facts as spark_cluster_facts returns them on a Spark, from the recordings.

def spark_facts(node: str, pair: dict, **overrides) -> dict:
    devices = cluster_tools.parse_ibdev2netdev(recording("ibdev2netdev.txt"))
    interfaces = {}
    for index, rail in enumerate(pair["rails"]):
        number = 1 if node == "spark-01" else 2
        interfaces[rail["interface"]] = {
            "exists": True, "operstate": "up", "mtu": 9000, "addresses": [pair["addresses"][node][index]],
            "link_local6": [f"fe80::{number}:{index}"], "speed_mbps": 200000,
            "pcie": {"vendor": "0x15b3", "width": 4, "speed": "16.0 GT/s PCIe"}, "kind": None}
    meminfo = cluster_tools.parse_meminfo(recording("meminfo-cma0.txt"))
    facts = {"interfaces": interfaces, "rdma": devices, "meminfo": {**meminfo, "CmaTotal": 524288}, "gpu": True,
             "nccl_conf": {"files": {}, "read": ["/etc/nccl.conf"], "image_error": None}}
    facts.update(overrides)
    return facts


def spark_measures(pair: dict, **overrides) -> list[dict]:
    ok = cluster_tools.parse_ping(recording("ping-reach.txt"))
    return [{"peer": "spark-02", "rail": index, "interface": rail["interface"],
             "address": pair["addresses"]["spark-02"][index].split("/")[0],
             "neighbors": [f"fe80::1:{index}", f"fe80::2:{index}"], "reach": ok, "jumbo": ok,
             "tcp": {"received_gbps": 41.3}, "rdma": cluster_tools.parse_ib_write_bw(recording("ib_write_bw-rail.txt")),
             **({"ssh": {"ok": True, "detail": "nvidia@192.168.100.11: logged in, host key pinned"}}
                if index == 0 else {}), **overrides}
            for index, rail in enumerate(pair["rails"])]


def nccl(name: str) -> dict:
    return {"ran": True, "parsed": cluster_tools.parse_nccl_tests(recording(name))}


def verdict(pair=None, facts=None, measures=None, run=None):
    pair = pair or model()
    facts = facts or {n: spark_facts(n, pair) for n in pair["nodes"]}
    measures = measures if measures is not None else {"spark-01": spark_measures(pair), "spark-02": []}
    return cluster_verdict.judge(pair, facts, measures,
                                 run if run is not None else nccl("nccl-all_gather-23.6.txt"), THRESHOLDS)


def failed(result: dict) -> list[tuple[str, str]]:
    return [(c["check"], c["where"]) for c in result["checks"] if c["status"] == "failed"]


def test_a_healthy_pair_is_ok_with_its_bandwidths():
    result = verdict()
    assert result["verdict"] == "ok", [c for c in result["checks"] if c["status"] != "ok"]
    assert result["counts"] == {"ok": len(result["checks"]), "failed": 0, "not run": 0, "not judged": 0}
    assert result["bandwidth"]["nccl"] == [{"where": "pair", "value": 23.67}]
    assert [b["value"] for b in result["bandwidth"]["rdma_bw"]] == [92.58, 92.58]
    lines = cluster_verdict.verdict_lines([result])
    assert lines[0] == f"cluster pair (spark-01, spark-02): OK - {len(result['checks'])} ok, 0 failed, 0 not run or " \
                       "not judged"


def test_nccl_at_3_gbs_fails_naming_the_one_half_and_the_mtu():
    result = verdict(run=nccl("nccl-all_gather-3gbps.txt"))
    (check,) = [c for c in result["checks"] if c["status"] == "failed"]
    assert (check["check"], check["found"]) == ("nccl", "3.0 GB/s bus bandwidth (2147483648 bytes)")
    assert "NCCL_IB_HCA naming one half of the port, or MTU 1500" in check["cause"]
    assert check["expected"].startswith(">= 21.875 GB/s (NVIDIA's cluster script warns below 21.875 GB/s")


def test_mtu_1500_on_one_node_fails_the_mtu_and_the_jumbo_frames():
    pair = model()
    facts = {n: spark_facts(n, pair) for n in pair["nodes"]}
    facts["spark-02"]["interfaces"]["enP2p1s0f1np1"]["mtu"] = 1500
    dropped = cluster_tools.parse_ping(recording("ping-jumbo-peer-mtu-1500.txt"))
    measures = spark_measures(pair)
    measures[1]["jumbo"] = dropped
    result = verdict(pair, facts, {"spark-01": measures})
    assert failed(result) == [("mtu", "spark-02 enP2p1s0f1np1"), ("jumbo", "spark-01 -> spark-02 enP2p1s0f1np1")]
    mtu = next(c for c in result["checks"] if c["check"] == "mtu" and c["status"] == "failed")
    assert (mtu["found"], mtu["expected"]) == (1500, 9000) and "PR #103" in mtu["cause"]


def test_a_rail_missing_on_a_node_fails_naming_what_the_node_has():
    pair = model()
    facts = {n: spark_facts(n, pair) for n in pair["nodes"]}
    facts["spark-02"]["interfaces"]["enP2p1s0f1np1"] = {"exists": False}
    result = verdict(pair, facts)
    (check,) = [c for c in result["checks"] if c["check"] == "interface"]
    assert check["status"] == "failed" and check["found"] == "absent (it has enp1s0f1np1)"
    assert "a rail is missing" in check["cause"] and "ibdev2netdev" in check["fix"]


def test_cma_total_0_fails_with_the_enomem_it_causes():
    pair = model()
    facts = {n: spark_facts(n, pair) for n in pair["nodes"]}
    facts["spark-01"]["meminfo"]["CmaTotal"] = 0
    result = verdict(pair, facts)
    assert failed(result) == [("cma", "spark-01")]
    assert "ibv_reg_mr fails with ENOMEM" in next(c for c in result["checks"] if c["check"] == "cma")["cause"]


def test_a_stale_nccl_conf_in_the_image_fails_naming_each_setting_it_overrides():
    pair = model()
    facts = {n: spark_facts(n, pair) for n in pair["nodes"]}
    image = "nvcr.io/nvidia/pytorch@sha256:" + "1" * 64
    facts["spark-02"]["nccl_conf"] = {"files": {f"{image}:/etc/nccl.conf": cluster_tools.parse_nccl_conf(
        recording("nccl.conf-stale"))}, "read": [f"{image}:/etc/nccl.conf"], "image_error": None}
    result = verdict(pair, facts)
    (check,) = [c for c in result["checks"] if c["status"] == "failed"]
    assert check["check"] == "nccl_conf" and check["where"] == "spark-02"
    assert check["found"] == (f"{image}:/etc/nccl.conf sets NCCL_IB_HCA=mlx5_0; "
                              f"{image}:/etc/nccl.conf sets NCCL_SOCKET_IFNAME=eth0")
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in check["expected"]


def test_a_crossed_cable_is_named_by_the_port_that_answers():
    pair = model()
    measures = spark_measures(pair)
    measures[0]["neighbors"] = ["fe80::1:0", "fe80::2:1"]  # spark-02's second half answers on the first rail
    measures[1]["neighbors"] = ["fe80::1:1", "fe80::2:0"]
    result = verdict(pair, measures={"spark-01": measures})
    cables = [c for c in result["checks"] if c["check"] == "cable"]
    assert [(c["status"], c["found"], c["expected"]) for c in cables] == [
        ("failed", "spark-02 enP2p1s0f1np1", "spark-02 enp1s0f1np1"),
        ("failed", "spark-02 enp1s0f1np1", "spark-02 enP2p1s0f1np1")]
    assert "crossed cable" in cables[0]["cause"]


def test_a_lab_of_virtual_links_is_not_verified_with_what_ran_passing():
    pair = model()
    facts = {n: spark_facts(n, pair, rdma=[], gpu=False) for n in pair["nodes"]}
    for node in facts.values():
        for interface in node["interfaces"].values():
            interface.update(pcie=None, kind="veth", speed_mbps=10000)
    measures = spark_measures(pair, rdma=None, rdma_why="no RDMA device serves the rail")
    result = verdict(pair, facts, {"spark-01": measures}, {"ran": False, "why": "no GPU answers nvidia-smi"})
    assert result["verdict"] == "not verified" and failed(result) == []
    statuses = {(c["check"], c["status"]) for c in result["checks"]}
    assert {("speed", "not run"), ("rdma", "not run"), ("tcp", "not judged"), ("nccl", "not run"),
            ("mtu", "ok"), ("jumbo", "ok"), ("cable", "ok"), ("ssh", "ok")} <= statuses
    tcp = next(c for c in result["checks"] if c["check"] == "tcp")
    assert tcp["found"] == "41.3 Gb/s" and "unconfirmed" in tcp["expected"]
    lines = cluster_verdict.verdict_lines([result])
    assert lines[1:] == [
        "  not run: speed, pcie_width, rdma (spark-01 enp1s0f1np1; spark-01 enP2p1s0f1np1; spark-02 enp1s0f1np1; "
        "spark-02 enP2p1s0f1np1): a virtual link (veth), not a CX-7 port",
        "  not run: cma (spark-01; spark-02): no RDMA device on this node: no memory to register",
        "  not judged: tcp (spark-01 -> spark-02 enp1s0f1np1; spark-01 -> spark-02 enP2p1s0f1np1): a virtual link, "
        "not a CX-7 port: measured, not judged",
        "  not run: rdma_bw (spark-01 -> spark-02 enp1s0f1np1; spark-01 -> spark-02 enP2p1s0f1np1): no RDMA device "
        "serves the rail",
        "  not run: nccl (pair): no GPU answers nvidia-smi",
        "  tcp spark-01 -> spark-02 enp1s0f1np1: 41.3 Gb/s", "  tcp spark-01 -> spark-02 enP2p1s0f1np1: 41.3 Gb/s"]


def test_no_bandwidth_is_judged_towards_a_peer_that_does_not_answer_on_the_rail():
    pair = model()
    measures = spark_measures(pair)
    silent = cluster_tools.parse_ping(recording("ping-unreachable.txt"))
    measures[1].update(reach=silent, tcp=None, rdma=None, tcp_why="spark-02 does not answer on enP2p1s0f1np1",
                       rdma_why="spark-02 does not answer on enP2p1s0f1np1")
    result = verdict(pair, measures={"spark-01": measures})
    assert failed(result) == [("reach", "spark-01 -> spark-02 enP2p1s0f1np1")]
    second = {(c["check"], c["status"]) for c in result["checks"]
              if c["where"] == "spark-01 -> spark-02 enP2p1s0f1np1"}
    assert second == {("cable", "ok"), ("reach", "failed"), ("tcp", "not run"), ("rdma_bw", "not run")}


def test_ssh_refused_and_an_unreachable_peer_fail_with_what_was_said():
    pair = model()
    measures = spark_measures(pair)
    measures[0]["ssh"] = {"ok": False, "detail": "nvidia@192.168.100.11: Host key verification failed."}
    measures[1] = {"peer": "spark-02", "rail": 1, "interface": "enP2p1s0f1np1", "address": "192.168.101.11",
                   "error": "this node has no address on enP2p1s0f1np1"}
    result = verdict(pair, measures={"spark-01": measures})
    assert failed(result) == [("ssh", "spark-01 -> spark-02 enp1s0f1np1"),
                              ("reach", "spark-01 -> spark-02 enP2p1s0f1np1")]
    assert next(c for c in result["checks"] if c["check"] == "ssh")["found"].endswith("Host key verification failed.")


def test_a_link_local_rail_is_measured_over_ipv6_link_local_a_static_one_at_its_address():
    """IPv4 link-local rails all hold 169.254.0.0/16, so a packet to a peer's 169.254 address may leave, or its
    answer return, by the other cable: such a rail is measured at the peer's fe80:: address scoped to it."""
    linked = cluster_model.validate([{**copy.deepcopy(PAIR), "addressing": "link-local",
                                      "rails": [{"interface": r["interface"], "hca": r["hca"]} for r in RAILS]}],
                                    HOSTS)
    hostvars = {node: {"spark_cluster_facts": {"interfaces": {rail["interface"]: {
        "addresses": [f"169.254.{number}.{index + 1}/16"], "link_local6": [f"fe80::{number}:{index}"]}
        for index, rail in enumerate(RAILS)}}} for number, node in ((1, "spark-01"), (2, "spark-02"))}
    args = spark_cluster_measure_args(linked, "spark-01", hostvars)
    assert args["rails"][1] == {"interface": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "169.254.1.2",
                                "link_local": True, "address6": "fe80::1:1"}
    assert args["peers"] == [{"name": "spark-02", "index": 1, "addresses": ["169.254.2.1", "169.254.2.2"],
                              "addresses6": ["fe80::2:0", "fe80::2:1"]}]
    static = spark_cluster_measure_args([model()], "spark-01", hostvars)
    assert [r["link_local"] for r in static["rails"]] == [False, False]
    assert static["peers"][0]["addresses"] == ["192.168.100.11", "192.168.101.11"]
