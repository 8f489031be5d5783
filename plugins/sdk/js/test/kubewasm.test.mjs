// kubewasm.js against a fake host: finalizer preconditions, the reconcile error variants, filters.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import {
  HostError, Kind, Registration, RequeueAfterError, TerminalError, addFinalizer, controllerReference, finalize,
  desired, innermostFrame, isControlledBy, reconciler, removeFinalizer, requeueAfter,
} from '../kubewasm.js';

const WIDGET = new Kind('example.com/v1', 'Widget');
const NAME = 'example.com/cleanup';
const decoder = new TextDecoder();

const widget = (meta = {}) => ({
  apiVersion: 'example.com/v1', kind: 'Widget',
  metadata: { name: 'w', namespace: 'ns', uid: 'u1', resourceVersion: '5', ...meta },
});

// An API server holding `objects` by name: a precondition that does not match is a conflict.
let objects;
let patches;
beforeEach(() => {
  objects = {};
  patches = [];
  globalThis.kubewasmFakeHost = {
    client: {
      patch(gvk, namespace, name, patchType, body, preconditions) {
        patches.push({ name, body: JSON.parse(decoder.decode(body)), preconditions });
        const stored = objects[name];
        if (!stored) throw { payload: { tag: 'not-found' } };
        const { uid, resourceVersion } = preconditions;
        if ((uid !== undefined && uid !== stored.metadata.uid)
          || (resourceVersion !== undefined && resourceVersion !== stored.metadata.resourceVersion)) {
          throw { payload: { tag: 'conflict', val: 'precondition failed' } };
        }
        Object.assign(stored.metadata, JSON.parse(decoder.decode(body)).metadata);
        stored.metadata.resourceVersion = String(Number(stored.metadata.resourceVersion) + 1);
        return new TextEncoder().encode(JSON.stringify(stored));
      },
    },
  };
});

const fail = () => assert.fail('must not be called');

test('a live object gets the finalizer with preconditions before apply', () => {
  objects.w = widget();
  const seen = [];
  finalize(WIDGET, widget(), NAME, { apply: (o) => seen.push(o), cleanup: fail });
  assert.deepEqual(patches[0].body, { metadata: { finalizers: [NAME] } });
  assert.deepEqual(patches[0].preconditions, { uid: 'u1', resourceVersion: '5' });
  assert.deepEqual(seen[0].metadata.finalizers, [NAME]);
});

test('cleanup runs, then the finalizer goes, keeping the others', () => {
  const deleting = widget({ finalizers: ['other', NAME], deletionTimestamp: '2026-01-01T00:00:00Z' });
  objects.w = structuredClone(deleting);
  const cleaned = [];
  const result = finalize(WIDGET, deleting, NAME, { apply: fail, cleanup: (o) => { cleaned.push(o); return requeueAfter(5); } });
  assert.deepEqual(cleaned, [deleting]);
  assert.deepEqual(result, requeueAfter(5));
  assert.deepEqual(patches[0].body, { metadata: { finalizers: ['other'] } });
});

test('a failed cleanup keeps the finalizer', () => {
  const deleting = widget({ finalizers: [NAME], deletionTimestamp: '2026-01-01T00:00:00Z' });
  assert.throws(() => finalize(WIDGET, deleting, NAME, { apply: fail, cleanup: () => { throw new Error('down'); } }));
  assert.equal(patches.length, 0);
});

test('a stale copy is a conflict, not a clobbered list', () => {
  objects.w = widget({ resourceVersion: '6', finalizers: ['added-meanwhile'] });
  assert.throws(() => addFinalizer(WIDGET, widget(), NAME), (e) => e instanceof HostError && e.reason === 'conflict');
  assert.deepEqual(objects.w.metadata.finalizers, ['added-meanwhile']);
});

test('an object being deleted without the finalizer is left alone', () => {
  const gone = widget({ deletionTimestamp: '2026-01-01T00:00:00Z' });
  assert.equal(finalize(WIDGET, gone, NAME, { apply: fail, cleanup: fail }), undefined);
  assert.equal(patches.length, 0);
});

test('removing from an object already gone returns undefined', () => {
  assert.equal(removeFinalizer(WIDGET, widget({ finalizers: [NAME] }), NAME), undefined);
});

const NS = new Kind('v1', 'Namespace');
const request = { kind: NS.gvk, key: { name: 'a' }, attempt: 0 };
const thrownBy = (fn) => {
  try {
    reconciler(new Registration(NS), fn).reconcile(request);
  } catch (e) {
    return e;
  }
  return assert.fail('reconcile did not throw');
};

test('thrown errors become the reconcile error variant that says how to retry', () => {
  assert.deepEqual(thrownBy(() => { throw new TerminalError('bad spec'); }), { tag: 'terminal', val: 'bad spec' });
  assert.deepEqual(thrownBy(() => { throw new RequeueAfterError(2500, 'waiting for Secret db'); }),
    { tag: 'requeue-after', val: { afterMs: 2500n, reason: 'waiting for Secret db' } });
  const retryable = thrownBy(function welcome() { throw new TypeError('x is undefined'); });
  assert.equal(retryable.tag, 'retryable');
  assert.match(retryable.val, /^TypeError: x is undefined at kubewasm\.test\.mjs:\d+:\d+ in welcome$/);
});

test('a stack frame is read from SpiderMonkey (componentize-js) and V8 alike', () => {
  assert.equal(innermostFrame('welcome@hello-js.js:31:17\nreconcile@hello-js.js:40:3\n'), 'hello-js.js:31:17 in welcome');
  assert.equal(innermostFrame('@hello-js.js:31:17\n'), 'hello-js.js:31:17');
  assert.equal(innermostFrame('TypeError: x\n    at welcome (file:///src/hello-js.js:31:17)\n'), 'hello-js.js:31:17 in welcome');
  assert.equal(innermostFrame('TypeError: x\n    at file:///src/hello-js.js:31:17\n'), 'hello-js.js:31:17');
  assert.equal(innermostFrame(undefined), undefined);
});

test('requeueAfter and nothing are the two actions', () => {
  const { reconcile } = reconciler(new Registration(NS), () => requeueAfter(1500));
  assert.deepEqual(reconcile(request), { desired: undefined, action: { tag: 'requeue-after', val: 1500n } });
  assert.deepEqual(reconciler(new Registration(NS), () => {}).reconcile(request), { desired: undefined, action: { tag: 'done' } });
});

test('map errors are host errors', () => {
  const { map } = reconciler(new Registration(NS), () => {}, () => { throw new HostError('unavailable', 'cache'); });
  assert.throws(() => map(new Kind('v1', 'ConfigMap').gvk, new TextEncoder().encode('{}')),
    (e) => e.tag === 'unavailable' && e.val === 'cache');
});

test('event filters are per use, with predicate flags', () => {
  const reg = new Registration(NS, undefined, { labelSelector: 'a=b', generationChanged: true })
    .owns(new Kind('v1', 'ConfigMap'), { namespace: 'x', labelsChanged: true })
    .watches(new Kind('v1', 'Secret'), 'c=d');
  assert.equal(reg.raw.forFilter.labelSelector, 'a=b');
  assert.deepEqual(reg.raw.forFilter.predicates, { generationChanged: true, labelsChanged: false, annotationsChanged: false });
  assert.equal(reg.raw.owns[0].filter.namespace, 'x');
  assert.equal(reg.raw.watches[0].filter.labelSelector, 'c=d');
  assert.throws(() => new Registration(NS, undefined, { generationChange: true }), /unknown event filter/);
});

test('isControlledBy follows the controller reference', () => {
  const owner = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'a', uid: 'u1' } };
  const child = { metadata: { ownerReferences: [controllerReference(owner)] } };
  assert.ok(isControlledBy(child, owner));
  assert.equal(isControlledBy(child, { metadata: { uid: 'u2' } }), false);
  assert.equal(isControlledBy(undefined, owner), false);
});

test('a desired state carries its children and status as JSON bytes', () => {
  const child = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a', namespace: 'a' } };
  const { reconcile } = reconciler(new Registration(NS), () => desired([child], { status: { ready: true }, requeueAfterMs: 2000 }));
  const out = reconcile(request);
  const text = (bytes) => JSON.parse(new TextDecoder().decode(bytes));
  assert.deepEqual(out.desired.children.map(text), [child]);
  assert.deepEqual(text(out.desired.status), { ready: true });
  assert.deepEqual(out.action, { tag: 'requeue-after', val: 2000n });
  const nothing = reconciler(new Registration(NS), () => desired()).reconcile(request);
  assert.deepEqual(nothing, { desired: { children: [], status: undefined }, action: { tag: 'done' } });
});

test('an owned kind prunes in the background unless told otherwise, and a bad policy throws', () => {
  const cm = new Kind('v1', 'ConfigMap');
  assert.equal(new Registration(NS).owns(cm).raw.owns[0].prune, 'background');
  assert.equal(new Registration(NS).owns(cm, {}, { prune: 'never' }).raw.owns[0].prune, 'never');
  assert.throws(() => new Registration(NS).owns(cm, {}, { prune: 'orphan' }), /prune must be one of/);
});
