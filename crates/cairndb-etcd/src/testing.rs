//! Test support (feature `testing`): a 3-member etcd cluster on loopback,
//! started from the `etcd` binary on `PATH`, with free ports and a
//! temporary data directory per member; members can be killed, restarted,
//! stopped and continued. Every wait is bounded, and dropping the cluster
//! kills its processes and removes its directories.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `etcd` binary, if one is installed.
pub fn etcd_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

/// Whether the cluster tests must run (`CAIRN_REQUIRE_ETCD=1`, which
/// `.ci/run` sets): then a missing `etcd` fails them instead of skipping.
pub fn etcd_required() -> bool {
    std::env::var("CAIRN_REQUIRE_ETCD").is_ok_and(|v| v == "1")
}

/// A fresh 3-member cluster for test `test`, or `None` (with a line on
/// the real standard error, past the test harness's capture, so that the
/// skip is seen) when `etcd` is not installed and not required; a missing
/// `etcd` under `CAIRN_REQUIRE_ETCD=1` fails the test; a cluster that
/// does not start is the error.
pub fn cluster_or_skip(test: &str) -> std::io::Result<Option<Cluster>> {
    cluster_or_skip_with(test, 3, &[])
}

/// [`cluster_or_skip`] for a cluster of `size` members started with the
/// etcd flags `member_args` ([`Cluster::start_with`]).
pub fn cluster_or_skip_with(
    test: &str,
    size: usize,
    member_args: &[&str],
) -> std::io::Result<Option<Cluster>> {
    if etcd_binary().is_none() {
        assert!(
            !etcd_required(),
            "CAIRN_REQUIRE_ETCD=1 but no `etcd` on PATH (apt-get install etcd-server)"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: no `etcd` on PATH (apt-get install etcd-server; \
             CAIRN_REQUIRE_ETCD=1 makes this a failure)"
        );
        return Ok(None);
    }
    Cluster::start_with(size, member_args).map(Some)
}

/// How long a cluster may take to elect a leader and answer.
pub const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);

/// One member's process and addresses.
#[derive(Debug)]
pub struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl Member {
    /// `127.0.0.1:port` of the member's client listener.
    pub fn client_address(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }
}

/// A running cluster. Dropping it kills every member.
#[derive(Debug)]
pub struct Cluster {
    etcd: PathBuf,
    dir: PathBuf,
    initial_cluster: String,
    /// Flags every member is started (and restarted) with, after the
    /// harness's own.
    member_args: Vec<String>,
    members: Vec<Member>,
}

/// A port free now (bound then released; the cluster fails to start in the
/// rare case another process takes it in between).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Cluster {
    /// Starts `size` members and waits until they all answer.
    pub fn start(size: usize) -> std::io::Result<Cluster> {
        Cluster::start_with(size, &[])
    }

    /// Starts `size` members, each with the etcd flags `member_args` after
    /// the harness's own (e.g. `["--quota-backend-bytes", "1048576"]`),
    /// and waits until they all answer.
    pub fn start_with(size: usize, member_args: &[&str]) -> std::io::Result<Cluster> {
        let etcd = etcd_binary().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no etcd binary on PATH")
        })?;
        let unique = format!(
            "cairndb-etcd-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let dir = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&dir)?;
        let mut members = Vec::new();
        let mut ports = Vec::new();
        while ports.len() < 2 * size {
            let p = free_port()?;
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        for i in 0..size {
            members.push(Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                data_dir: dir.join(format!("m{i}")),
                log: dir.join(format!("m{i}.log")),
                child: None,
                stopped: false,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            etcd,
            dir,
            initial_cluster,
            member_args: member_args.iter().map(|a| a.to_string()).collect(),
            members,
        };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        cluster.wait_healthy(HEALTHY_TIMEOUT)?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> std::io::Result<()> {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)?;
        let mut command = Command::new(&self.etcd);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; it asks the kernel to kill
            // the member when the test process dies (even by SIGKILL, when
            // `Drop` cannot run), so no member outlives its test. The signal
            // comes when the spawning *thread* ends: start and restart a
            // cluster from the thread that runs the test.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let child = command
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "cairndb-test"])
            // Loopback: short heartbeats and elections keep failover fast.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--log-level", "warn", "--logger", "zap"])
            .args(&self.member_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.members[i].child = Some(child);
        self.members[i].stopped = false;
        Ok(())
    }

    /// The members.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// An `etcd://` URL of every member, with `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        self.url_of(&(0..self.members.len()).collect::<Vec<_>>(), prefix)
    }

    /// Puts `value` under the raw etcd key `key` (no prefix added, no
    /// version key touched): what another program could write, for tests
    /// that damage a prefix on purpose (an index entry no document has).
    pub fn raw_put(&self, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        let endpoints: Vec<String> = self.members.iter().map(Member::client_address).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let mut client = etcd_client::Client::connect(&endpoints, None).await?;
            client.put(key, value, None).await?;
            Ok::<(), etcd_client::Error>(())
        })
        .map_err(std::io::Error::other)
    }

    /// An `etcd://` URL of the given members only.
    pub fn url_of(&self, members: &[usize], prefix: &str) -> String {
        let hosts: Vec<String> = members
            .iter()
            .map(|&i| self.members[i].client_address())
            .collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
    }

    /// Waits until every running, not stopped member answers a
    /// linearizable read (so a leader is elected and it has caught up).
    pub fn wait_healthy(&self, timeout: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + timeout;
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() || m.stopped {
                continue;
            }
            loop {
                let options = crate::Options {
                    request_timeout: Duration::from_secs(1),
                    connect_timeout: Duration::from_secs(1),
                    ..crate::Options::default()
                };
                match crate::EtcdDatabase::connect_with(&self.url_of(&[i], "health"), options)
                    .and_then(|db| db.current_revision())
                {
                    Ok(_) => break,
                    Err(e) if Instant::now() > deadline => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "member {} not healthy within {timeout:?}: {e}; its log ends:\n{}",
                                m.name,
                                self.log_tail(i)
                            ),
                        ))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
        Ok(())
    }

    /// The index of the member that leads now, as the first running member
    /// to answer says (bounded by [`HEALTHY_TIMEOUT`]).
    pub fn leader(&self) -> std::io::Result<usize> {
        let deadline = Instant::now() + HEALTHY_TIMEOUT;
        loop {
            for (i, m) in self.members.iter().enumerate() {
                if m.child.is_none() || m.stopped {
                    continue;
                }
                let Ok(status) = self.status_of(i) else {
                    continue;
                };
                let (leader, me) = status;
                if leader != 0 && leader == me {
                    return Ok(i);
                }
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no member says it leads",
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Member `i`'s view: (the leader's id, its own id).
    fn status_of(&self, i: usize) -> crate::Result<(u64, u64)> {
        let options = crate::Options {
            request_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            ..crate::Options::default()
        };
        let db = crate::EtcdDatabase::connect_with(&self.url_of(&[i], "health"), options)?;
        let mut client = db.client.clone();
        let status = db.run(
            crate::db::Kind::Read,
            None,
            async move { client.status().await },
        )?;
        let me = status.header().map_or(0, |h| h.member_id());
        Ok((status.leader(), me))
    }

    /// The last lines of a member's log.
    pub fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(&self.members[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills member `i` with SIGKILL (no chance to flush anything) and
    /// reaps it.
    pub fn kill(&mut self, i: usize) -> std::io::Result<()> {
        if let Some(mut child) = self.members[i].child.take() {
            signal(&child, libc::SIGCONT);
            child.kill()?;
            child.wait()?;
        }
        self.members[i].stopped = false;
        Ok(())
    }

    /// Starts member `i` again on its data directory (after [`kill`](Self::kill)).
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        if self.members[i].child.is_none() {
            self.spawn(i)?;
        }
        Ok(())
    }

    /// Freezes member `i` (SIGSTOP): it answers nobody, peers or clients.
    pub fn stop(&mut self, i: usize) {
        if let Some(child) = &self.members[i].child {
            signal(child, libc::SIGSTOP);
            self.members[i].stopped = true;
        }
    }

    /// Lets a stopped member run again (SIGCONT).
    pub fn cont(&mut self, i: usize) {
        if let Some(child) = &self.members[i].child {
            signal(child, libc::SIGCONT);
            self.members[i].stopped = false;
        }
    }

    /// The cluster's directory (data directories and logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            let _ = self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
