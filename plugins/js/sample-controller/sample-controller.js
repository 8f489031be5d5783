// sample-controller: kubernetes/sample-controller's Foo controller in desired-state mode, the
// JavaScript twin of plugins/rust/sample-controller (same CRD, deploy/crds/examples/foo.yaml, and
// the same behaviour): a Foo's Deployment with its replicas, its available replicas in the Foo's
// status, `ErrResourceExists` for a Deployment the Foo does not control, `Synced` Events.

import { Kind, Registration, TerminalError, cache, desired, events, isControlledBy, reconciler } from '../../sdk/js/kubewasm.js';

const FOO = new Kind('samplecontroller.k8s.io/v1alpha1', 'Foo');
const DEPLOYMENT = new Kind('apps/v1', 'Deployment');

/** The Deployment `foo` wants (the host adds the Foo as its owner). */
const deployment = (foo, name, namespace) => {
  const labels = { app: 'nginx', controller: foo.metadata.name };
  return {
    apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name, namespace },
    spec: {
      replicas: foo.spec?.replicas ?? 1, selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { containers: [{ name: 'nginx', image: 'nginx:latest' }] } },
    },
  };
};

export const { describe, reconcile, map } = reconciler(
  new Registration(FOO).owns(DEPLOYMENT),
  (request) => {
    const foo = cache.get(FOO, request.name, request.namespace);
    if (!foo) return;
    const name = foo.spec?.deploymentName;
    if (!name) throw new TerminalError(`${request.namespace}/${request.name}: deployment name must be specified`);
    const existing = cache.get(DEPLOYMENT, name, request.namespace);
    if (existing && !isControlledBy(existing, foo)) {
      const message = `Resource "${name}" already exists and is not managed by Foo`;
      events.warning(foo, 'ErrResourceExists', message);
      throw new Error(message);
    }
    events.normal(foo, 'Synced', 'Foo synced successfully');
    return desired([deployment(foo, name, request.namespace)], { status: { availableReplicas: existing?.status?.availableReplicas ?? 0 } });
  },
);
