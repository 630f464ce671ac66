"""The cluster file loader: what it accepts, and one line naming the key for each problem."""

from __future__ import annotations

import pytest

from haqueue.config.cluster import ClusterFileError, load_cluster, parse_cluster

BASE = """\
[cluster]
name = "orders"
vip = "192.0.2.100/24"
secret = "change-me"

[[nodes]]
id = "n1"
address = "192.0.2.11"
interface = "eth1"
priority = 150

[[nodes]]
id = "n2"
address = "192.0.2.12"
interface = "eth1"
priority = 140

[[directors]]
id = "d1"
address = "192.0.2.2"
interface = "eth1"
priority = 150
"""


def error_for(text: str) -> str:
    with pytest.raises(ClusterFileError) as info:
        parse_cluster(text, source="c.toml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_minimal_file_gets_documented_defaults():
    c = parse_cluster(BASE)
    assert (c.client_port, c.raft_port, c.admin_port, c.virtual_router_id) == (11300, 11400, 11500, 51)
    assert c.vip_address == "192.0.2.100" and c.vip_prefixlen == 24
    assert [n.id for n in c.nodes] == ["n1", "n2"] and [d.id for d in c.directors] == ["d1"]
    assert c.keepalived.advert_int == 0.1 and c.keepalived.check == "http"
    assert c.lvs.mode == "dr" and c.lvs.virtual_router_id is None
    assert c.deploy.config_path == "/etc/haqueue/cluster.toml"


def test_data_dir_defaults_under_deploy_data_dir_and_node_value_wins():
    c = parse_cluster(BASE.replace('priority = 140\n', 'priority = 140\ndata_dir = "/srv/hq"\n'))
    assert c.data_dir_of(c.nodes[0]) == "/var/lib/haqueue/n1"
    assert c.data_dir_of(c.nodes[1]) == "/srv/hq"


def test_leader_check_command_defaults_to_is_leader_for_the_node():
    c = parse_cluster(BASE)
    assert c.leader_check_command(c.nodes[1]) == (
        "/usr/local/bin/haqueue node is-leader --config /etc/haqueue/cluster.toml --node n2"
    )


def test_leader_check_command_template_replaces_node():
    c = parse_cluster(BASE + '[keepalived]\ncheck = "command"\ncheck_command = "/opt/chk --id {node}"\n')
    assert c.leader_check_command(c.nodes[0]) == "/opt/chk --id n1"


def test_optional_tables_are_read():
    c = parse_cluster(
        BASE
        + '[keepalived]\nadvert_int = 0.25\nstart_delay = 0\n'
        + '[lvs]\nmode = "nat"\nnat_gateway = "192.0.2.1"\nvirtual_router_id = 52\n'
        + '[deploy]\nuser = "hq"\n'
    )
    assert c.keepalived.advert_int == 0.25 and c.keepalived.start_delay == 0
    assert (c.lvs.mode, c.lvs.nat_gateway, c.lvs.virtual_router_id) == ("nat", "192.0.2.1", 52)
    assert c.deploy.user == "hq"


def test_limits_tls_and_admin_token_are_read_with_documented_defaults():
    c = parse_cluster(BASE)
    assert (c.limits.max_connections, c.limits.max_tubes, c.limits.max_watched_tubes) == (10000, 100000, 1000)
    assert (c.limits.max_memory, c.limits.output_timeout, c.limits.disk_reserve) == (0, 60.0, None)
    assert c.limits.max_input_buffers == 256 << 20
    assert c.tls is None and c.admin_token is None
    c = parse_cluster(BASE.replace('secret = "change-me"\n', 'secret = "change-me"\nadmin_token = "t0k"\n')
                      + '[limits]\nmax_connections = 500\nmax_memory = "2GiB"\noutput_timeout = 5\n'
                      + 'max_input_buffers = "64MiB"\n'
                      + '[tls]\ncert = "/etc/haqueue/cert.pem"\nkey = "/etc/haqueue/key.pem"\n')
    assert (c.limits.max_connections, c.limits.max_memory, c.limits.output_timeout) == (500, 2 << 30, 5.0)
    assert c.limits.max_input_buffers == 64 << 20
    assert (c.tls.cert, c.tls.key) == ("/etc/haqueue/cert.pem", "/etc/haqueue/key.pem")
    assert c.admin_token == "t0k"


@pytest.mark.parametrize("value, floor", [('"256MiB"', 256 << 20), ("1000000", 1000000), ('"off"', -1),
                                          ('"OFF"', -1), ('"0"', 0)])
def test_the_disk_reserve_floor_is_a_size_or_off(value, floor):
    assert parse_cluster(BASE + f"[limits]\ndisk_reserve = {value}\n").limits.disk_reserve == floor


def test_load_cluster_reports_a_missing_file(tmp_path):
    with pytest.raises(ClusterFileError, match=r"nope\.toml: no such file"):
        load_cluster(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # a bad VIP
        ('vip = "192.0.2.100/24"', 'vip = "192.0.2.300/24"', "cluster.vip: '192.0.2.300/24' is not an IPv4"),
        ('vip = "192.0.2.100/24"', 'vip = "192.0.2.100"', "cluster.vip: '192.0.2.100' needs a prefix length"),
        ('vip = "192.0.2.100/24"', 'vip = "192.0.2.255/24"', "cluster.vip: 192.0.2.255/24 is the network or broadcast"),
        # an address outside the VIP's subnet
        ('address = "192.0.2.12"', 'address = "198.51.100.12"',
         "nodes[1].address: 198.51.100.12 is outside the VIP's subnet 192.0.2.0/24"),
        ('address = "192.0.2.2"', 'address = "10.0.0.2"',
         "directors[0].address: 10.0.0.2 is outside the VIP's subnet 192.0.2.0/24"),
        ('address = "192.0.2.12"', 'address = "192.0.2.100"', "nodes[1].address: 192.0.2.100 is the VIP itself"),
        ('address = "192.0.2.12"', 'address = "node-2"', "nodes[1].address: 'node-2' is not an IPv4 address"),
        # a duplicate node id or priority
        ('id = "n2"', 'id = "n1"', "nodes[1].id: duplicate id 'n1' (also nodes[0])"),
        ('id = "d1"', 'id = "n1"', "directors[0].id: duplicate id 'n1' (also nodes[0])"),
        ('priority = 140', 'priority = 150', "nodes[1].priority: duplicate priority 150 (also n1)"),
        ('priority = 140', 'priority = 255', "nodes[1].priority: 255 is out of range 1..254"),
        # a virtual_router_id out of 1..255
        ('secret = "change-me"', 'secret = "change-me"\nvirtual_router_id = 256',
         "cluster.virtual_router_id: 256 is out of range 1..255"),
        ('secret = "change-me"', 'secret = "change-me"\nvirtual_router_id = 0',
         "cluster.virtual_router_id: 0 is out of range 1..255"),
        # a missing or bad interface
        ('interface = "eth1"\npriority = 140', 'priority = 140', "nodes[1].interface: missing"),
        ('interface = "eth1"\npriority = 140', 'interface = "a-very-long-ifname0"\npriority = 140',
         "nodes[1].interface: 'a-very-long-ifname0' is not a valid interface name"),
        # the rest of the shape
        ('name = "orders"\n', '', "cluster.name: missing"),
        ('secret = "change-me"', 'secret = "change-me"\nclient_port = 70000',
         "cluster.client_port: 70000 is out of range 1..65535"),
        ('secret = "change-me"', 'secret = "change-me"\ncolour = "red"', "cluster.colour: unknown key"),
        ('[[directors]]', '[[director]]', "director: unknown table"),
    ],
)
def test_each_problem_is_one_line_naming_the_key(old, new, expected):
    assert old in BASE
    message = error_for(BASE.replace(old, new, 1))
    assert message.startswith(f"c.toml: {expected}")


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('[keepalived]\nadvert_int = 0.005', "keepalived.advert_int: 0.005 is out of range 0.01..40.95"),
        ('[keepalived]\nadvert_int = 0.125', "keepalived.advert_int: 0.125 is not a multiple of 0.01 s"),
        ('[keepalived]\nadvert_int = "fast"', "keepalived.advert_int: must be a number of seconds, not 'fast'"),
        ('[keepalived]\ncheck = "tcp"', "keepalived.check: 'tcp' is not one of http, command"),
        ('[keepalived]\ncheck_command = "haqueue node is-leader"',
         "keepalived.check_command: must start with the absolute path of the program"),
        ('[keepalived]\ncheck_command = "/bin/chk {host}"',
         "keepalived.check_command: unknown placeholder {host} (only {node} is replaced)"),
        ('[keepalived]\ncheck_command = "/bin/chk \'n1\'"',
         "keepalived.check_command: must not contain quotes, backslashes or newlines"),
        ('[keepalived]\nscript_user = "Root User"', "keepalived.script_user: 'Root User' is not a valid user name"),
        ('[keepalived]\nscript_dir = "etc/keepalived"', "keepalived.script_dir: 'etc/keepalived' must be an absolute"),
        ('[keepalived]\nfast = true', "keepalived.fast: unknown key"),
        ('[lvs]\nmode = "fullnat"', "lvs.mode: 'fullnat' is not one of dr, tun, nat"),
        ('[lvs]\nmode = "nat"', "lvs.nat_gateway: missing: NAT mode needs the real servers' gateway address"),
        ('[lvs]\nnat_gateway = "192.0.2.11"', "lvs.nat_gateway: 192.0.2.11 is already n1's address"),
        ('[lvs]\nnat_gateway = "10.1.1.1"', "lvs.nat_gateway: 10.1.1.1 is outside the VIP's subnet 192.0.2.0/24"),
        ('[lvs]\nvirtual_router_id = 300', "lvs.virtual_router_id: 300 is out of range 1..255"),
        ('[lvs]\nconn_tab_bits = 24', "lvs.conn_tab_bits: 24 is out of range 8..20"),
        ('[deploy]\nconfig_path = "/etc/my cluster.toml"', "deploy.config_path: '/etc/my cluster.toml' must be"),
        ('deploy = 3', "deploy: must be a table"),
        ('[limits]\nmax_connections = 0', "limits.max_connections: 0 is out of range 1..10000000"),
        ('[limits]\nmax_memory = "lots"', "limits.max_memory: 'lots' is not a size"),
        ('[limits]\nmax_memory = true', "limits.max_memory: must be bytes or a size"),
        ('[limits]\nmax_input_buffers = "much"', "limits.max_input_buffers: 'much' is not a size"),
        ('[limits]\noutput_timeout = "1m"', "limits.output_timeout: must be a number of seconds"),
        ('[limits]\ndisk_reserve = "some"', "limits.disk_reserve: 'some' is not a size"),
        ('[limits]\ndisk_reserve = false', "limits.disk_reserve: must be bytes, a size like"),
        ('[limits]\nmax_clients = 5', "limits.max_clients: unknown key"),
        ('[tls]\ncert = "/etc/haqueue/cert.pem"', "tls.key: missing: TLS needs both cert and key"),
    ],
)
def test_optional_table_problems_name_the_key(table, expected):
    message = error_for(BASE + table + "\n" if not table.startswith("deploy =") else table + "\n" + BASE)
    assert message.startswith(f"c.toml: {expected}")


def test_invalid_toml_is_one_line():
    message = error_for(BASE + "[[nodes]\n")
    assert message.startswith("c.toml: not valid TOML:")


def test_id_port_is_off_by_default_and_read_from_cluster_and_node():
    c = parse_cluster(BASE)
    assert c.id_port == 0 and [n.id_port for n in c.nodes] == [0, 0]
    c = parse_cluster(BASE.replace('secret = "change-me"\n', 'secret = "change-me"\nid_port = 1200\n')
                      .replace('priority = 140\n', 'priority = 140\nid_port = 1201\n'))
    assert c.id_port == 1200 and [n.id_port for n in c.nodes] == [1200, 1201]


def test_id_port_errors_name_the_key():
    assert "cluster.id_port" in error_for(BASE.replace('secret = "change-me"\n',
                                                       'secret = "change-me"\nid_port = 70000\n'))
    shared_host = BASE.replace('address = "192.0.2.12"', 'address = "192.0.2.11"\nclient_port = 1\n'
                               'raft_port = 2\nadmin_port = 3')
    assert parse_cluster(shared_host).nodes[1].address == "192.0.2.11"
    message = error_for(shared_host.replace('secret = "change-me"\n', 'secret = "change-me"\nid_port = 1200\n'))
    assert "nodes[1].id_port" in message and "already used by n1" in message


ORDER_RULE = """
[[id_rules]]
name = "order_id"
format = "O{yy:02}{month:02}{day:02}{counter:06}"
max_counter = 999999
reset_seconds = 86400
timezone = "+08:00"
mode = "segment"
"""


def test_id_rules_are_read_with_their_defaults():
    from haqueue.core.idrules import IdRule

    assert parse_cluster(BASE).id_rules == ()
    (rule,) = parse_cluster(BASE + ORDER_RULE).id_rules
    assert rule == IdRule("order_id", "O{yy:02}{month:02}{day:02}{counter:06}", min_counter=0,
                          max_counter=999999, reset_seconds=86400, utc_offset=8 * 3600, mode="segment",
                          segment=1000)
    (plain,) = parse_cluster(BASE + '[[id_rules]]\nname = "n"\nformat = "{counter:019}"\n').id_rules
    assert (plain.mode, plain.segment, plain.reset_seconds, plain.utc_offset) == ("exact", 0, 0, 0)


@pytest.mark.parametrize("old, new, expected", [
    ("{counter:06}", "{counter:05}", "id_rules[0]: id rule 'order_id': format "),
    ("{day:02}{counter", "{counter", "render the same for two cycles"),
    ('"+08:00"', '"Asia/Shanghai"', "id_rules[0].timezone: timezone 'Asia/Shanghai'"),
    ('mode = "segment"', 'mode = "fast"', "id_rules[0].mode: 'fast' is not one of exact, segment"),
    ('mode = "segment"', 'mode = "segment"\nsegment = 0', "segment 0 is out of range"),
    ('mode = "segment"', 'mode = "segment"\nlua_file = "x.lua"', "id_rules[0].lua_file: unknown key"),
    ("max_counter = 999999", "max_counter = -1", "id_rules[0].max_counter: -1 is out of range"),
])
def test_an_id_rule_that_could_repeat_ids_is_refused_in_one_line(old, new, expected):
    message = error_for(BASE + ORDER_RULE.replace(old, new))
    assert message.startswith("c.toml: ") and expected in message, message


def test_an_id_rule_defined_twice_is_refused():
    assert "id_rules[1].name: duplicate rule 'order_id' (also id_rules[0])" in error_for(BASE + ORDER_RULE * 2)
def test_gearman_port_is_off_by_default_and_read_from_cluster_and_node():
    c = parse_cluster(BASE)
    assert c.gearman_port == 0 and [n.gearman_port for n in c.nodes] == [0, 0]
    c = parse_cluster(BASE.replace('secret = "change-me"\n', 'secret = "change-me"\ngearman_port = 4730\n')
                      .replace('priority = 140\n', 'priority = 140\ngearman_port = 4731\n'))
    assert c.gearman_port == 4730 and [n.gearman_port for n in c.nodes] == [4730, 4731]


def test_a_gearman_port_may_not_be_another_tcp_port_of_the_node():
    message = error_for(BASE.replace('secret = "change-me"\n', 'secret = "change-me"\ngearman_port = 11300\n'))
    assert "nodes[0].gearman_port" in message and "already used by n1 client_port" in message
