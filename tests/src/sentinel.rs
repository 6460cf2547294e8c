//! A Sentinel setup on loopback: a master, a replica of it, and three
//! sentinels watching them, every process stopped when dropped.

use crate::redis::{
    RedisServer, command, die_with_this_thread, free_port, temp_dir, wait_until_ready,
};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a sentinel waits for a silent master before it deems it down
/// (`down-after-milliseconds`); a failover follows within a few seconds.
pub const DOWN_AFTER: Duration = Duration::from_millis(1_000);

/// One `redis-server --sentinel` process.
struct SentinelProcess {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl SentinelProcess {
    /// Starts a sentinel watching the master at `master_port` as `service`,
    /// with a quorum of 2, and `extra` lines of configuration.
    fn start(service: &str, master_port: u16, extra: &str) -> Self {
        let port = free_port();
        let dir = temp_dir();
        let config = dir.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel monitor {service} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {service} {down}\n\
             sentinel failover-timeout {service} 5000\n\
             sentinel parallel-syncs {service} 1\n{extra}\n",
            dir = dir.display(),
            down = DOWN_AFTER.as_millis(),
        );
        std::fs::write(&config, text).expect("write the sentinel's configuration");
        let mut cmd = Command::new("redis-server");
        cmd.arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_this_thread(&mut cmd);
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start redis-server --sentinel ({e}); scripts/test.sh installs it")
        });
        if let Err(why) = wait_until_ready(port, &mut child) {
            let log = std::fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default();
            panic!("sentinel on port {port} {why}; its log:\n{log}");
        }
        SentinelProcess { port, dir, child }
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, one replica, three sentinels (quorum 2) watching `service`.
pub struct SentinelSetup {
    service: String,
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<SentinelProcess>,
}

impl SentinelSetup {
    /// Starts the servers and the sentinels, and waits until the replica is
    /// in sync and every sentinel knows the replica and the two other
    /// sentinels: only then can a failover happen.
    pub fn start(service: &str) -> Self {
        Self::start_with(service, &[], "")
    }

    /// [`start`](Self::start) with extra arguments for both servers and
    /// extra configuration lines for the sentinels (ACL users, say).
    pub fn start_with(service: &str, server_args: &[&str], sentinel_config: &str) -> Self {
        let master = RedisServer::start_with(server_args);
        let master_port = master.port().to_string();
        let mut replica_args = vec!["--replicaof", "127.0.0.1", &master_port];
        replica_args.extend_from_slice(server_args);
        let replica = RedisServer::start_with(&replica_args);
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(service, master.port(), sentinel_config))
            .collect();
        let setup = SentinelSetup {
            service: service.to_owned(),
            master,
            replica,
            sentinels,
        };
        setup.wait_until_ready_for_failover();
        setup
    }

    fn wait_until_ready_for_failover(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = || {
            self.replica
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
                && self.sentinels.iter().all(|s| {
                    // RESP arrays: one entry per replica, per other sentinel.
                    command(s.port, &["SENTINEL", "REPLICAS", &self.service]).starts_with("*1")
                        && command(s.port, &["SENTINEL", "SENTINELS", &self.service])
                            .starts_with("*2")
                })
        };
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "the Sentinel setup never settled"
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/SERVICE`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{}", sentinels.join(","), self.service)
    }

    /// The port of the master the first live sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = command(
                s.port,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.service],
            );
            // *2 $9 127.0.0.1 $N PORT
            reply.lines().nth(4)?.trim().parse().ok()
        })
    }

    /// Sends one command to the first sentinel; the raw reply.
    pub fn sentinel_command(&self, args: &[&str]) -> String {
        command(self.sentinels[0].port, args)
    }

    /// The first master.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The replica (the master after a failover).
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Kills the master (as a crash would).
    pub fn kill_master(&mut self) {
        self.master.kill();
    }

    /// Kills the master and starts it again on its port, empty, answering
    /// before this returns: quicker than the sentinels' down-after, so it
    /// stays the master.
    pub fn restart_master(&mut self) {
        self.master.restart();
    }
}
