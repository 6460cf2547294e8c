//! A real Cluster whose nodes ask for a password, given to the `server`
//! playground on each node of the `--store` URL, or on the first only
//! (the others take it): the server starts, shares the limit through the
//! Cluster, and shows the password nowhere.

mod playground;

use playground::Server;
use tollgate_tests::redis::RedisCluster;

const PW: &str = "s3cret-pw";

#[test]
fn a_cluster_url_with_a_password_per_node_limits_through_the_cluster() {
    let cluster = RedisCluster::start(3);
    let ports: Vec<u16> = cluster.nodes().iter().map(|n| n.port()).collect();
    for node in cluster.nodes() {
        node.command(&["CONFIG", "SET", "masterauth", PW]);
        node.command(&["CONFIG", "SET", "requirepass", PW]);
    }
    let each: Vec<String> = ports
        .iter()
        .map(|port| format!(":{PW}@127.0.0.1:{port}"))
        .collect();
    let urls = [
        format!("redis+cluster://{}", each.join(",")),
        format!(
            "redis+cluster://{},127.0.0.1:{},127.0.0.1:{}",
            each[0], ports[1], ports[2]
        ),
    ];
    for url in &urls {
        let args = [
            "--store",
            url,
            "--limit",
            "api=2/min",
            "--key",
            "header:x-k",
        ];
        let server = Server::start(&args);
        let statuses: Vec<u16> = (0..3)
            .map(|_| playground::request(&server.addr, "/", &[("x-k", url)]).status)
            .collect();
        assert_eq!(statuses, [200, 200, 429], "{url}");
        let logs = server.logs().join("\n");
        assert!(!logs.contains(PW), "{logs}");
    }
}
