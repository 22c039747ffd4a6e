//! Property: the URL's `user:password@` reaches a cluster with
//! authentication on; without them, or with a wrong password, the
//! connection is refused with an error naming the endpoints.

use cairndb_etcd::{Error, EtcdDatabase};

use crate::common::cluster;

#[test]
fn credentials_in_the_url_authenticate() {
    let Some(c) = cluster("credentials_in_the_url_authenticate") else {
        return;
    };
    let endpoints = cairndb_etcd::EtcdUrl::parse(&c.url("x")).unwrap().endpoints;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap();
        client.user_add("root", "s3cret", None).await.unwrap();
        client.user_grant_role("root", "root").await.unwrap();
        client.auth_enable().await.unwrap();
    });
    let hosts = c.url("app").trim_start_matches("etcd://").to_string();
    let db = EtcdDatabase::connect(&format!("etcd://root:s3cret@{hosts}")).unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table("t").unwrap().insert(b"k", b"v").unwrap();
    tx.commit().unwrap();
    let rx = db.begin_read().unwrap();
    assert_eq!(
        rx.open_table("t").unwrap().get(b"k").unwrap(),
        Some(b"v".to_vec())
    );

    for url in [
        format!("etcd://{hosts}"),
        format!("etcd://root:wrong@{hosts}"),
    ] {
        let e = EtcdDatabase::connect(&url).unwrap_err();
        assert!(matches!(e, Error::Etcd { .. }), "{url}: {e:?}");
        assert!(e.to_string().contains(&endpoints[0]), "{e}");
    }
}
