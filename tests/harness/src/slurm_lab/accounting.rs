//! Slurm accounting for a lab: a private MariaDB (`mariadbd` as a child, its own datadir,
//! socket and loopback port) and the lab release's `slurmdbd` on it, so `sacct` shows what
//! Slurm stored.

use super::daemons::{daemon_bin, run_with_timeout, set_mode, terminate};
use super::ports::free_port;
use super::*;

/// The accounting daemons of a lab and their ports.
pub struct Accounting {
    db_port: u16,
    dbd_port: u16,
    mariadbd: Option<Child>,
    slurmdbd: Option<Child>,
    /// slurm.conf's `PrivateData=` line, if any: slurmdbd enforces it for `sacct` from its own
    /// configuration, so it is written there too.
    private_data: Option<String>,
}

impl Accounting {
    /// Reserves the ports; the daemons start with [`SlurmLab::start_accounting`].
    pub fn new(extra_conf: &str) -> Accounting {
        let private_data =
            extra_conf.lines().find(|l| l.trim().starts_with("PrivateData=")).map(str::to_string);
        Accounting {
            db_port: free_port(),
            dbd_port: free_port(),
            mariadbd: None,
            slurmdbd: None,
            private_data,
        }
    }
}

impl SlurmLab {
    /// The `slurm.conf` lines for the lab's accounting storage.
    pub(super) fn accounting_conf(&self) -> String {
        match &self.accounting {
            None => "AccountingStorageType=accounting_storage/none".to_string(),
            // For slurmdbd connections, AccountingStoragePass names the munge socket to use.
            Some(a) => format!(
                "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n\
                 AccountingStoragePort={}\nAccountingStoragePass={}/run/munge.sock",
                a.dbd_port,
                self.path.display()
            ),
        }
    }

    /// Starts MariaDB and slurmdbd, and waits until slurmdbd answers.
    pub(super) fn start_accounting(&mut self) {
        let Some(found) = self.accounting.as_ref().map(|a| (a.db_port, a.dbd_port, a.private_data.clone()))
        else {
            return;
        };
        let (db_port, dbd_port, private_data) = found;
        let lab = self.path.clone();
        let data = lab.join("db/data");
        fs::create_dir_all(&data).expect("create db dir");
        // MariaDB's temporary files in the lab, not in the machine's /tmp: there labs started at
        // once lost each other's temporary tables (mariadb-install-db aborted on "Error on
        // delete of '/tmp/#sql-temptable-...'").
        let tmp = lab.join("db/tmp");
        fs::create_dir_all(&tmp).expect("create db tmp dir");
        let sock = lab.join("run/mysqld.sock");
        let cnf = lab.join("etc/my.cnf");
        fs::write(
            &cnf,
            format!(
                "[mysqld]\ndatadir={}\nsocket={}\npid-file={}\nport={db_port}\nbind-address=127.0.0.1\nuser=root\n\
                 skip-name-resolve\ninnodb_buffer_pool_size=32M\ninnodb_log_file_size=8M\nperformance_schema=OFF\n\
                 skip-log-bin\nlog-error={}\ntmpdir={}\n",
                data.display(),
                sock.display(),
                lab.join("run/mysqld.pid").display(),
                lab.join("log/mariadbd.log").display(),
                tmp.display()
            ),
        )
        .expect("write my.cnf");
        let mut install = Command::new("mariadb-install-db");
        install
            .arg(format!("--defaults-file={}", cnf.display()))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db"]);
        match run_with_timeout(&mut install, START_TIMEOUT) {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                self.fail(&format!("mariadb-install-db failed: {}", String::from_utf8_lossy(&out.stderr)))
            }
            Err(e) => self.fail(&format!("mariadb-install-db: {e}")),
        }
        let db = self.spawn_machine_daemon(
            "mariadbd",
            PathBuf::from("/usr/sbin/mariadbd"),
            &[format!("--defaults-file={}", cnf.display())],
        );
        self.accounting.as_mut().expect("accounting").mariadbd = Some(db);
        let password = format!("lab{:x}", std::process::id() as u64 * 7919 + u64::from(db_port));
        let grant = format!(
            "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; \
             GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        );
        self.poll("MariaDB to accept the grant", || {
            let mut cmd = Command::new("mariadb");
            cmd.arg(format!("--socket={}", sock.display())).args(["-u", "root", "-e", &grant]);
            run_with_timeout(&mut cmd, CLIENT_TIMEOUT).is_ok_and(|o| o.status.success())
        });
        // slurmdbd reads slurmdbd.conf beside $SLURM_CONF and refuses one others can read.
        let dbd_conf = lab.join("etc/slurmdbd.conf");
        fs::write(
            &dbd_conf,
            format!(
                "DbdAddr=127.0.0.1\nDbdHost=localhost\nDbdPort={dbd_port}\nSlurmUser=root\nAuthType=auth/munge\n\
                 AuthInfo=socket={lab}/run/munge.sock\nLogFile={lab}/log/slurmdbd.log\nPidFile={lab}/run/slurmdbd.pid\n\
                 StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\nStorageUser=slurm\n\
                 StoragePass={password}\nStorageLoc=slurm_acct_db\n{private}",
                lab = lab.display(),
                private = private_data.map(|l| format!("{l}\n")).unwrap_or_default(),
            ),
        )
        .expect("write slurmdbd.conf");
        set_mode(&dbd_conf, 0o600);
        // The release's own slurmdbd (a root's, under chroot) on the machine's MariaDB.
        let dbd =
            self.spawn_daemon("slurmdbd", daemon_bin("slurmdbd"), &["-D".to_string(), "-s".to_string()]);
        self.accounting.as_mut().expect("accounting").slurmdbd = Some(dbd);
        self.poll("slurmdbd to answer sacctmgr", || {
            let mut cmd = self.command("sacctmgr");
            cmd.args(["-n", "-P", "show", "cluster"]);
            run_with_timeout(&mut cmd, CLIENT_TIMEOUT).is_ok_and(|o| o.status.success())
        });
    }

    /// Stops slurmdbd, then MariaDB (after slurmctld and slurmd are gone).
    pub(super) fn stop_accounting(&mut self) {
        if let Some(mut a) = self.accounting.take() {
            for child in [a.slurmdbd.take(), a.mariadbd.take()].into_iter().flatten() {
                let mut child = child;
                terminate(&mut child);
            }
        }
    }

    fn poll(&self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        while !ready() {
            self.check_alive();
            if Instant::now() >= deadline {
                self.fail(&format!("timed out waiting for {what}"));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}
