//! The server-side shard selector on the wire: a kube `Client` that adds `shardSelector` to
//! every request, and the probe that tells whether the server honoured it.
//!
//! kube's `ListParams`/`WatchParams` (kube 5) have no `shardSelector` (KEP-5866, alpha in
//! Kubernetes 1.36), and kube-runtime's watcher builds its requests itself, so the parameter is
//! added below the watcher: a tower service in front of the host's client rewrites the query.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use kube::Client;
use kube::client::Body;

use super::range::HashRange;

/// The list/watch query parameter (`metav1.ListOptions.ShardSelector`, `json:"shardSelector"`).
pub const SHARD_SELECTOR_PARAM: &str = "shardSelector";

/// A client whose every request carries `shardSelector=<range.selector()>`. Only for the
/// list and watch requests of one collection (a reflector's).
pub fn sharded_client(client: Client, range: &HashRange) -> Client {
    let encoded: String = form_urlencoded::byte_serialize(range.selector().as_bytes()).collect();
    let default_namespace = client.default_namespace().to_owned();
    let service = AddQuery { client, param: format!("{SHARD_SELECTOR_PARAM}={encoded}").into() };
    Client::new(service, default_namespace)
}

/// Appends one `name=value` pair to each request's query.
#[derive(Clone)]
struct AddQuery {
    client: Client,
    param: Arc<str>,
}

impl tower::Service<http::Request<Body>> for AddQuery {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let uri = request.uri().to_string();
        let separator = if uri.contains('?') { '&' } else { '?' };
        if let Ok(with_param) = format!("{uri}{separator}{}", self.param).parse() {
            *request.uri_mut() = with_param;
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// Whether the server filtered a one-item list of `collection` (a resource URL) by `range`: it
/// echoes the selector in `metadata.shardInfo.selector` when it did (feature gate
/// `ShardedListAndWatch` on); older servers and the gate off ignore the parameter.
pub async fn server_honours(client: &Client, collection: &str, range: &HashRange) -> kube::Result<bool> {
    let sharded = sharded_client(client.clone(), range);
    let request =
        http::Request::get(format!("{collection}?limit=1")).body(Vec::new()).map_err(kube::Error::HttpError)?;
    let list: serde_json::Value = sharded.request(request).await?;
    Ok(echoed(&list, range))
}

fn echoed(list: &serde_json::Value, range: &HashRange) -> bool {
    list.pointer("/metadata/shardInfo/selector").and_then(serde_json::Value::as_str) == Some(range.selector().as_str())
}

#[cfg(test)]
mod tests {
    use super::super::range::split;
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_echo_of_the_same_selector_counts_as_honoured() {
        let [a, b] = split(2)[..] else { panic!() };
        let list = json!({"metadata": {"shardInfo": {"selector": a.selector()}}});
        assert!(echoed(&list, &a));
        assert!(!echoed(&list, &b));
        assert!(!echoed(&json!({"metadata": {"resourceVersion": "1"}}), &a));
    }

    #[tokio::test]
    async fn every_request_carries_the_selector() {
        let (service, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let client = Client::new(service, "default");
        let range = split(2)[1];
        let sharded = sharded_client(client, &range);
        let request = http::Request::get("/api/v1/configmaps?watch=true").body(Vec::new()).unwrap();
        let call = tokio::spawn(async move { sharded.request_text(request).await });
        let (sent, respond) = handle.next_request().await.unwrap();
        respond.send_response(http::Response::new(Body::from(b"{}".to_vec())));
        let query = sent.uri().query().unwrap().to_owned();
        assert!(query.starts_with("watch=true&shardSelector=shardRange%28object.metadata.namespace"), "{query}");
        let decoded: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        assert!(decoded.contains(&(SHARD_SELECTOR_PARAM.to_owned(), range.selector())));
        call.await.unwrap().unwrap();
    }
}
