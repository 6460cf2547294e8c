//! Certificates for TLS tests, made by the `openssl` command in a
//! temporary directory: a CA, a server certificate it signed for
//! `127.0.0.1` and `localhost`, a client certificate it signed, and a
//! second CA that signed nothing (for a client that must refuse the
//! server).

use crate::redis::{RedisServer, free_port, temp_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The files of one set of test certificates, removed when dropped.
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    /// Makes the certificates (a second or so: elliptic-curve keys).
    pub fn make() -> Self {
        let dir = temp_dir();
        let certificates = Certificates { dir };
        certificates.make_ca("ca");
        certificates.make_ca("other-ca");
        certificates.make_signed("server", "localhost", "serverAuth,clientAuth");
        certificates.make_signed("client", "tollgate-test-client", "clientAuth");
        certificates
    }

    /// The CA that signed the server's and the client's certificates.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A CA that signed neither.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.join("other-ca.pem")
    }

    /// The server's certificate and key.
    pub fn server(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("server.pem"), self.dir.join("server.key"))
    }

    /// The client's certificate and key.
    pub fn client(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("client.pem"), self.dir.join("client.key"))
    }

    /// `redis-server` arguments for TLS on `tls_port` with these
    /// certificates; clients must show a certificate the CA signed when
    /// `clients_show_certificates`.
    pub fn server_args(&self, tls_port: u16, clients_show_certificates: bool) -> Vec<String> {
        let (cert, key) = self.server();
        let auth = if clients_show_certificates {
            "yes"
        } else {
            "no"
        };
        [
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path(&cert),
            "--tls-key-file",
            &path(&key),
            "--tls-ca-cert-file",
            &path(&self.ca()),
            "--tls-auth-clients",
            auth,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn make_ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=tollgate test {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn make_signed(&self, name: &str, common_name: &str, usage: &str) {
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={common_name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        let extensions = format!(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
        );
        std::fs::write(self.dir.join(format!("{name}.ext")), extensions)
            .expect("write an extensions file");
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run openssl ({e}); scripts/test.sh installs it"));
        assert!(status.success(), "openssl {args:?} failed");
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

/// A `redis-server` that also listens with TLS: the harness talks to its
/// plain port, the store under test to the TLS one.
pub struct TlsServer {
    /// The server.
    pub server: RedisServer,
    /// Its TLS port.
    pub tls_port: u16,
}

impl TlsServer {
    /// Starts one with `certificates` (see [`Certificates::server_args`]).
    pub fn start(certificates: &Certificates, clients_show_certificates: bool) -> Self {
        let tls_port = free_port();
        let args = certificates.server_args(tls_port, clients_show_certificates);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TlsServer {
            server: RedisServer::start_with(&args),
            tls_port,
        }
    }

    /// `rediss://HOST:PORT` of the TLS port, `host` being `127.0.0.1` or
    /// `localhost` (both are in the server's certificate).
    pub fn url(&self, host: &str) -> String {
        format!("rediss://{host}:{}", self.tls_port)
    }
}
