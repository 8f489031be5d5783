//! The review of each plugin version's own identity: what its ServiceAccount lacks for its grants.

use super::{LoadedPlugins, Plugin};

impl LoadedPlugins {
    /// What plugin `name`'s identity lacks for `plugin`'s grants (made first with
    /// `provision_rbac`); `None` when plugins are not impersonated. Missing rights are reported,
    /// not a rejection: the operator may be granting them right now. Meanwhile the plugin is
    /// served nothing of the kinds its identity may not read, its cache reads included.
    pub(super) async fn review_rbac(&self, name: &str, plugin: &Plugin) -> Option<Vec<String>> {
        let identity = self.options.identity.as_ref()?;
        let provision = self.options.provision_rbac;
        let discovery = self.ctx.factory.discovery();
        let review = crate::rbac::review::check(discovery, identity, provision, name, plugin.grants()).await;
        plugin.withhold(review.unreadable);
        let missing = review.missing;
        if !missing.is_empty() {
            tracing::warn!(
                plugin = name,
                missing = missing.join("; "),
                "the plugin's ServiceAccount lacks rights its grants need: its requests needing them will be forbidden"
            );
        }
        Some(missing)
    }

    /// Reviews the serving version of `name` again if its identity lacked anything (the
    /// operator may have granted it since); its [`Serving::rbac_missing`](super::Serving) then
    /// says what is still missing.
    pub async fn review_again(&self, name: &str) {
        let Some(plugin) = self.plugin(name).await else { return };
        let slot = self.slot(name);
        let lacking =
            slot.lock().await.as_ref().is_some_and(|s| s.rbac_missing.as_ref().is_some_and(|m| !m.is_empty()));
        if !lacking {
            return;
        }
        // Reviewed outside the slot's lock: a slow API server holds no other work on the plugin.
        let missing = self.review_rbac(name, &plugin).await;
        if let Some(current) = slot.lock().await.as_mut()
            && current.sha256 == plugin.sha256()
        {
            current.rbac_missing = missing;
        }
    }
}
