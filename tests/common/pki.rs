//! Certificates for the TLS distribution tests, made with the `openssl` CLI (Debian `openssl`):
//! a CA, node certificates signed by it, and a rogue CA with its own node certificate. Node
//! certificates name `127.0.0.1` as an IP and as a DNS name (OTP 25's TLS distribution client
//! checks the host part of a node name as a DNS name).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct Cred {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub node: Cred,
    pub rogue_ca: PathBuf,
    pub rogue: Cred,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("`openssl` not found: install Debian's openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn ca(dir: &Path, name: &str) -> PathBuf {
    std::fs::write(
        dir.join(format!("{name}.cnf")),
        format!(
            "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3\n[dn]\nCN = smarm test {name}\n\
             [v3]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
             subjectKeyIdentifier = hash\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &format!("{name}.key")],
    );
    openssl(
        dir,
        &["req", "-x509", "-new", "-key", &format!("{name}.key"), "-config", &format!("{name}.cnf"), "-days", "3650"]
            .into_iter()
            .chain(["-out", &format!("{name}.pem")])
            .collect::<Vec<_>>(),
    );
    dir.join(format!("{name}.pem"))
}

fn leaf(dir: &Path, name: &str, ca: &str, serial: u32) -> Cred {
    std::fs::write(
        dir.join(format!("{name}.cnf")),
        format!(
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {name}\n\
             [ext]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage = serverAuth,clientAuth\nsubjectAltName = IP:127.0.0.1,DNS:127.0.0.1,DNS:localhost\n\
             subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n"
        ),
    )
    .unwrap();
    let key = format!("{name}.key");
    openssl(dir, &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &key]);
    openssl(dir, &["req", "-new", "-key", &key, "-config", &format!("{name}.cnf"), "-out", &format!("{name}.csr")]);
    let (csr, ca_pem, ca_key, serial, cnf, out) = (
        format!("{name}.csr"),
        format!("{ca}.pem"),
        format!("{ca}.key"),
        serial.to_string(),
        format!("{name}.cnf"),
        format!("{name}.pem"),
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-set_serial",
            &serial,
            "-days",
            "3650",
            "-extfile",
            &cnf,
            "-extensions",
            "ext",
            "-out",
            &out,
        ],
    );
    Cred { cert: dir.join(out), key: dir.join(key) }
}

impl Pki {
    /// Makes the certificates in a new directory under the system temp dir.
    pub fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("smarm_pki_{tag}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca_pem = ca(&dir, "ca");
        let rogue_ca = ca(&dir, "rogue_ca");
        let node = leaf(&dir, "node", "ca", 1);
        let rogue = leaf(&dir, "rogue", "rogue_ca", 2);
        Pki { dir, ca: ca_pem, node, rogue_ca, rogue }
    }

    pub fn tls(&self, cred: &Cred, ca: &Path) -> smarm::cluster::TlsConfig {
        smarm::cluster::TlsConfig::from_pem_files(&cred.cert, &cred.key, ca).unwrap()
    }

    /// An `-ssl_dist_optfile` for `erl`: mutual TLS with `cred`, trusting `ca`.
    pub fn erl_optfile(&self, cred: &Cred, ca: &Path, name: &str) -> PathBuf {
        let common = format!(
            "{{certfile,{:?}}},{{keyfile,{:?}}},{{cacertfile,{:?}}},{{verify,verify_peer}}",
            cred.cert.display().to_string(),
            cred.key.display().to_string(),
            ca.display().to_string()
        );
        let path = self.dir.join(format!("{name}.conf"));
        std::fs::write(
            &path,
            format!("[{{server,[{common},{{fail_if_no_peer_cert,true}}]}},\n {{client,[{common}]}}].\n"),
        )
        .unwrap();
        path
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
