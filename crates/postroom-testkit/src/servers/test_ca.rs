//! A certificate authority made in the test, and server certificates it signs: what a test
//! needs to run a server with TLS and check that a client verifies it (the right CA is
//! accepted, another CA or another name is refused).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, date_time_ymd,
};
use std::path::{Path, PathBuf};

/// A self-signed CA that lives for one test.
pub struct TestCa {
    name: String,
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

postroom_core::debug_showing!(TestCa { name });

/// A server (or client) certificate and its private key, both PEM.
#[derive(Clone)]
pub struct ServerCert {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The private key (PKCS#8 PEM).
    pub key_pem: String,
}

postroom_core::debug_showing!(ServerCert {});

fn validity(params: &mut CertificateParams) {
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2100, 1, 1);
}

impl TestCa {
    /// A new CA whose common name is `name`.
    #[must_use]
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("generate the CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params);
        let cert = params.self_signed(&key).expect("self-sign the CA");
        Self {
            name: name.to_string(),
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate (PEM): what a client trusts.
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Write the CA certificate to `dir/file` and return its path.
    pub fn write_cert(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, &self.cert_pem).expect("write the CA certificate");
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses), signed by this CA.
    #[must_use]
    pub fn server_cert(&self, names: &[&str]) -> ServerCert {
        self.signed(names, ExtendedKeyUsagePurpose::ServerAuth, validity)
    }

    /// A server certificate for `names` that expired on 1 January 2021.
    #[must_use]
    pub fn expired_server_cert(&self, names: &[&str]) -> ServerCert {
        self.signed(names, ExtendedKeyUsagePurpose::ServerAuth, |p| {
            p.not_before = date_time_ymd(2020, 1, 1);
            p.not_after = date_time_ymd(2021, 1, 1);
        })
    }

    /// A client certificate whose common name is `name`, for servers that verify clients.
    #[must_use]
    pub fn client_cert(&self, name: &str) -> ServerCert {
        self.signed(&[name], ExtendedKeyUsagePurpose::ClientAuth, validity)
    }

    fn signed(
        &self,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        valid: impl FnOnce(&mut CertificateParams),
    ) -> ServerCert {
        let key = KeyPair::generate().expect("generate the server key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server parameters");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        valid(&mut params);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign the server certificate");
        ServerCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_signs_server_certificates() {
        let ca = TestCa::new("postroom test CA");
        let cert = ca.server_cert(&["localhost", "127.0.0.1"]);
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(cert.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(cert.key_pem.contains("PRIVATE KEY"));
        assert_ne!(ca.cert_pem(), TestCa::new("other").cert_pem());
    }
}
