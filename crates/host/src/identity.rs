//! Whom the host's requests are sent as: its own identity, or, for a plugin's requests, the
//! plugin's ServiceAccount impersonated (`Impersonate-User`) over the host's one connection.
//!
//! kube-rs impersonates per `Config`, which means a client (and a connection pool) per
//! identity; here a plugin's client is a thin service in front of the host's client that adds
//! the header, so a hundred plugins still share the host's one connection pool.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderValue, Request};
use kube::Client;
use kube::client::Body;
use parking_lot::RwLock;

/// The name of plugin `plugin`'s ServiceAccount.
pub fn service_account_name(plugin: &str) -> String {
    format!("kubewasm-plugin-{plugin}")
}

/// The user of plugin `plugin`'s ServiceAccount in `namespace` (what `Impersonate-User` names).
pub fn user(namespace: &str, plugin: &str) -> String {
    format!("system:serviceaccount:{namespace}:{}", service_account_name(plugin))
}

/// The host's client, and each plugin's when plugins are impersonated.
#[derive(Clone)]
pub struct Identities {
    host: Client,
    /// The client plugins' requests leave through (default: the host's).
    sender: Client,
    plugins: Option<Arc<Plugins>>,
}

/// The impersonating clients, one per plugin, made on first use.
struct Plugins {
    /// Where the plugins' ServiceAccounts live (the host's namespace).
    namespace: String,
    clients: RwLock<HashMap<String, Client>>,
}

impl Identities {
    /// Every request sent as the host.
    pub fn host(client: Client) -> Self {
        Self { sender: client.clone(), host: client, plugins: None }
    }

    /// Sends plugins' requests through `client`, impersonating as before; the host's own keep
    /// the host's client. `kubewasm run` passes one without kube's retry layer, so that a 429
    /// reaches the write scheduler, which pauses that plugin alone and frees its seats meanwhile.
    #[must_use]
    pub fn sending_through(self, client: Client) -> Self {
        Self { sender: client, ..self }
    }

    /// A plugin's requests sent as its ServiceAccount in `namespace`.
    pub fn impersonating(self, namespace: &str) -> Self {
        let plugins = Plugins { namespace: namespace.to_owned(), clients: RwLock::default() };
        Self { plugins: Some(Arc::new(plugins)), ..self }
    }

    /// The host's own client.
    pub fn host_client(&self) -> &Client {
        &self.host
    }

    /// The user plugin `plugin`'s requests are sent as, if not the host's.
    pub fn user(&self, plugin: &str) -> Option<String> {
        self.plugins.as_ref().map(|p| user(&p.namespace, plugin))
    }

    /// The client for plugin `plugin`'s requests, or the host's for `None`.
    pub fn client_of(&self, plugin: Option<&str>) -> Client {
        plugin.map_or_else(|| self.host.clone(), |plugin| self.client(plugin))
    }

    /// The client for plugin `plugin`'s requests. Must be called on a tokio runtime (a new
    /// client starts its request buffer there).
    pub fn client(&self, plugin: &str) -> Client {
        let Some(plugins) = &self.plugins else { return self.sender.clone() };
        if let Some(client) = plugins.clients.read().get(plugin) {
            return client.clone();
        }
        let client = impersonated(&self.sender, &user(&plugins.namespace, plugin));
        plugins.clients.write().entry(plugin.to_owned()).or_insert(client).clone()
    }
}

/// A client sending every request through `host` with `Impersonate-User: user`. The API server
/// adds the ServiceAccount's groups itself when no `Impersonate-Group` is sent.
fn impersonated(host: &Client, user: &str) -> Client {
    let value = HeaderValue::from_str(user).expect("a ServiceAccount user name is a valid header value");
    let host = host.clone();
    let namespace = host.default_namespace().to_owned();
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let host = host.clone();
        request.headers_mut().insert("impersonate-user", value.clone());
        async move { host.send(request).await }
    });
    Client::new(service, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Response;
    use tower_test::mock;

    #[tokio::test]
    async fn a_plugins_requests_carry_its_service_account_and_the_hosts_do_not() {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let identities = Identities::host(Client::new(service, "default")).impersonating("kubewasm-system");
        let headers = |identities: Identities, plugin: Option<&'static str>| async move {
            let client = plugin.map_or_else(|| identities.host_client().clone(), |p| identities.client(p));
            let request = Request::get("/api/v1/namespaces").body(Body::empty()).unwrap();
            client.send(request).await.map(drop)
        };
        for (plugin, expected) in
            [(Some("web"), Some("system:serviceaccount:kubewasm-system:kubewasm-plugin-web")), (None, None)]
        {
            let sent = tokio::spawn(headers(identities.clone(), plugin));
            let (request, reply) = handle.next_request().await.expect("a request");
            let header = request.headers().get("impersonate-user").map(|v| v.to_str().unwrap().to_owned());
            assert_eq!(header.as_deref(), expected);
            reply.send_response(Response::new(Body::empty()));
            sent.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn without_impersonation_a_plugins_requests_are_sent_as_the_host() {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let identities = Identities::host(Client::new(service, "default"));
        assert_eq!(identities.user("web"), None);
        let client = identities.client("web");
        let sent =
            tokio::spawn(async move { client.send(Request::get("/api").body(Body::empty()).unwrap()).await.map(drop) });
        let (request, reply) = handle.next_request().await.expect("a request");
        assert_eq!(request.headers().get("impersonate-user"), None);
        reply.send_response(Response::new(Body::empty()));
        sent.await.unwrap().unwrap();
        let impersonating = identities.impersonating("ns");
        assert_eq!(impersonating.user("web").as_deref(), Some("system:serviceaccount:ns:kubewasm-plugin-web"));
    }

    #[tokio::test]
    async fn plugins_requests_leave_through_the_sending_client_and_the_hosts_through_its_own() {
        let (host, mut host_handle) = mock::pair::<Request<Body>, Response<Body>>();
        let (sender, mut sender_handle) = mock::pair::<Request<Body>, Response<Body>>();
        let identities = Identities::host(Client::new(host, "default"))
            .sending_through(Client::new(sender, "default"))
            .impersonating("ns");
        let send = |client: Client| {
            tokio::spawn(async move { client.send(Request::get("/api").body(Body::empty()).unwrap()).await.map(drop) })
        };
        let plugin = send(identities.client("web"));
        let (request, reply) = sender_handle.next_request().await.expect("the plugin's request, through the sender");
        assert!(request.headers().get("impersonate-user").is_some(), "still impersonated");
        reply.send_response(Response::new(Body::empty()));
        plugin.await.unwrap().unwrap();
        let host = send(identities.client_of(None));
        let (request, reply) = host_handle.next_request().await.expect("the host's request, through its own client");
        assert_eq!(request.headers().get("impersonate-user"), None);
        reply.send_response(Response::new(Body::empty()));
        host.await.unwrap().unwrap();
    }
}
