// Write kubewasm reconcile plugins in JavaScript.
//
// A plugin is one ES module that exports what `reconciler` returns; its function says what
// should exist:
//
//   import { Kind, Registration, reconciler, cache, desired } from '../../sdk/js/kubewasm.js';
//   const NAMESPACE = new Kind('v1', 'Namespace');
//   export const { describe, reconcile, map } = reconciler(
//     new Registration(NAMESPACE).owns(new Kind('v1', 'ConfigMap')),
//     (request) => {
//       if (!cache.get(NAMESPACE, request.name)) return;
//       return desired([{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'hello', namespace: request.name } }]);
//     });
//
// The host applies each child as the plugin (with force, a controller ownerReference to the key's
// object added), sends none that would change nothing, deletes what the plugin made for the key
// and no longer returns, then applies the status. A plugin may also write itself (`client`) and
// return nothing or `requeueAfter(ms)`.
//
// Bundled by rolldown and built with `componentize-js --wit wit/controller@0.3.0 -n controller`
// (`make plugins` does it). Objects are plain objects of the Kubernetes JSON; cache reads are
// local, writes go to the API server with field manager `kubewasm/<plugin>`. A failing host call
// throws a `HostError` (its `reason` says why). What the reconcile function throws says how the
// key is retried: a `TerminalError` never (until the object changes), a `RequeueAfterError` after
// a given delay, anything else with backoff. Every reconcile runs in a fresh instance: keep no
// state in module variables. Helpers: `finalize` (cleanup before deletion, with preconditions),
// `setStatusCondition` and friends (`meta.SetStatusCondition` semantics), `isControlledBy`.

import * as hostCache from 'kubewasm:controller/cache@0.3.0';
import * as hostClient from 'kubewasm:controller/client@0.3.0';
import * as hostConfig from 'kubewasm:controller/config@0.3.0';
import * as hostEvents from 'kubewasm:controller/events@0.3.0';
import * as hostLog from 'kubewasm:controller/log@0.3.0';

export * from './conditions.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const toBytes = (object) => encoder.encode(JSON.stringify(object));
const fromBytes = (bytes) => JSON.parse(decoder.decode(bytes));

/** A Kubernetes kind as it appears in JSON: `new Kind('apps/v1', 'Deployment')`. */
export class Kind {
  constructor(apiVersion, kind) {
    this.apiVersion = apiVersion;
    this.kind = kind;
  }

  /** The kind of a JSON object (its `apiVersion` and `kind`). */
  static of(object) {
    return new Kind(object.apiVersion, object.kind);
  }

  /** The WIT `gvk` record. */
  get gvk() {
    const slash = this.apiVersion.lastIndexOf('/');
    return slash < 0
      ? { group: '', version: this.apiVersion, kind: this.kind }
      : { group: this.apiVersion.slice(0, slash), version: this.apiVersion.slice(slash + 1), kind: this.kind };
  }

  static fromGvk(gvk) {
    return new Kind(gvk.group ? `${gvk.group}/${gvk.version}` : gvk.version, gvk.kind);
  }
}

/** A host call failed; `reason` is the WIT error's case (`not-found`, `forbidden`, `conflict`,
 * `invalid`, `unavailable`, `other`). */
export class HostError extends Error {
  constructor(reason, message) {
    super(message ? `${reason}: ${message}` : reason);
    this.name = 'HostError';
    this.reason = reason;
    this.detail = message;
  }
}

/** Thrown from the reconcile function: the object itself is wrong (an invalid spec) and retrying
 * cannot help, so the key is not retried until the object changes (controller-runtime's
 * `reconcile.TerminalError`; counted in `controller_runtime_terminal_reconcile_errors_total`). */
export class TerminalError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TerminalError';
  }
}

/** Thrown from the reconcile function: it failed, try again after exactly `ms` milliseconds (not
 * the key's backoff, which does not advance), logging `reason` (e.g. `waiting for Secret db`). */
export class RequeueAfterError extends Error {
  constructor(ms, reason) {
    super(reason);
    this.name = 'RequeueAfterError';
    this.ms = ms;
    this.reason = reason;
  }
}

const millis = (ms) => BigInt(Math.max(0, Math.round(ms)));
/** Where the innermost frame of a `stack` is, as `file.js:12:5 in fn` (`file.js:12:5` for an
 * anonymous function); `undefined` if it names none. Reads SpiderMonkey's `fn@url:12:5` frames
 * (componentize-js) and V8's `    at fn (url:12:5)` ones (node, where the SDK's tests run). */
export function innermostFrame(stack) {
  for (const line of String(stack ?? '').split('\n')) {
    const v8 = line.match(/^\s+at (?:(.*?) \()?(.*?):(\d+):(\d+)\)?$/);
    const sm = v8 ? undefined : line.match(/^(.*?)@(.*?):(\d+):(\d+)$/);
    const m = v8 ?? sm;
    if (!m) continue;
    const [, fn, url, lineNo, col] = m;
    const file = url.split('/').pop();
    return `${file}:${lineNo}:${col}${fn ? ` in ${fn.replace(/^Object\./, '')}` : ''}`;
  }
  return undefined;
}

/** `Type: message at file.js:12:5 in fn`: what was thrown and where, so the reconcile error
 * (log, Event, `kubewasm test`) names the line to look at. */
const describeError = (e) => {
  if (!(e instanceof Error)) return String(e);
  const where = innermostFrame(e.stack);
  return `${e.name}: ${e.message}${where ? ` at ${where}` : ''}`;
};

/** The WIT `reconcile-error` for what the reconcile function threw. */
export function reconcileError(e) {
  if (e instanceof TerminalError) return { tag: 'terminal', val: e.message };
  if (e instanceof RequeueAfterError) return { tag: 'requeue-after', val: { afterMs: millis(e.ms), reason: e.reason } };
  return { tag: 'retryable', val: describeError(e) };
}

/** The WIT `types.error` for what the map function threw. */
export function hostErrorOf(e) {
  if (e instanceof HostError) return e.reason === 'not-found' ? { tag: 'not-found' } : { tag: e.reason, val: e.detail ?? '' };
  return { tag: 'other', val: describeError(e) };
}

function call(fn, ...args) {
  try {
    return fn(...args);
  } catch (e) {
    const payload = e && typeof e === 'object' && 'payload' in e ? e.payload : e;
    if (payload && typeof payload === 'object' && typeof payload.tag === 'string') {
      throw new HostError(payload.tag, payload.val);
    }
    throw e;
  }
}

const PREDICATES = ['generationChanged', 'labelsChanged', 'annotationsChanged'];

/** A WIT `event-filter`: which events of one use of a kind (the for kind, one owned kind, one
 * watch) trigger; it filters that use only, never the cache. `{ namespace, labelSelector,
 * generationChanged, labelsChanged, annotationsChanged }`, all optional: adds and deletes always
 * pass, and with predicates set an update passes if any of them changed (controller-runtime's
 * `GenerationChangedPredicate`, `LabelChangedPredicate`, `AnnotationChangedPredicate`). */
export function eventFilter({ namespace, labelSelector, ...predicates } = {}) {
  const unknown = Object.keys(predicates).filter((k) => !PREDICATES.includes(k));
  if (unknown.length) throw new Error(`unknown event filter fields: ${unknown.join(', ')}`);
  return {
    namespace: namespace ?? undefined, labelSelector: labelSelector ?? undefined,
    predicates: Object.fromEntries(PREDICATES.map((p) => [p, Boolean(predicates[p])])),
  };
}

/** The prune policies of an owned kind (the WIT enum `prune`). */
const PRUNE = ['background', 'foreground', 'never'];

/** What the plugin reconciles, owns, watches, reads and writes; the setters chain. `selector`
 * (a label selector) or `filter` (see `eventFilter`) say which changes of the for kind trigger. */
export class Registration {
  constructor(forKind, selector, filter) {
    this.raw = {
      forKind: forKind.gvk, forFilter: eventFilter(filter ?? { labelSelector: selector }), owns: [], watches: [],
      reads: [], writes: [], indexes: [], maxConcurrent: undefined,
    };
  }

  /** Creates and controls objects of `kind` (a change enqueues the owner's key). `prune` says
   * what happens to one the plugin made for a key and no longer returns in its `desired`
   * children: `'background'` (deleted; Kubernetes' default), `'foreground'` (deleted once its own
   * dependents are) or `'never'`. */
  owns(kind, filter = {}, { prune = 'background' } = {}) {
    if (!PRUNE.includes(prune)) throw new TypeError(`prune must be one of ${PRUNE.join(', ')}, not ${prune}`);
    this.raw.owns.push({ kind: kind.gvk, filter: eventFilter(filter), prune });
    return this;
  }

  /** Watches `kind`; changes map to keys through the `map` function. */
  watches(kind, selector, filter) {
    this.raw.watches.push({ kind: kind.gvk, filter: eventFilter(filter ?? { labelSelector: selector }) });
    return this;
  }

  /** Also reads `kind` from the cache (needs a grant). */
  reads(kind) { this.raw.reads.push(kind.gvk); return this; }

  /** Also writes `kind` (needs a grant). */
  writes(kind) { this.raw.writes.push(kind.gvk); return this; }

  /** Builds index `name` over `kind`: `{ field: 'spec.nodeName' }` or `{ builtin: '...' }`. */
  index(kind, name, { field, builtin }) {
    const source = field !== undefined ? { tag: 'field', val: field } : { tag: 'builtin', val: builtin };
    this.raw.indexes.push({ kind: kind.gvk, name, source });
    return this;
  }

  /** Asks for `n` concurrent reconciles (the operator's setting wins). */
  maxConcurrent(n) { this.raw.maxConcurrent = n; return this; }
}

/** Succeeded; reconcile again after `ms` milliseconds (return it from the reconcile function; a
 * periodic re-check, the key's backoff is reset). For a failure retried after a delay, throw a
 * `RequeueAfterError`. */
export const requeueAfter = (ms) => ({ requeueAfterMs: ms });

const DESIRED = Symbol('kubewasm.desired');

/** What should exist for the key (return it from the reconcile function): `children`, full
 * objects as `client.apply` takes them; `status`, the key object's `status` (undefined leaves it
 * alone); `requeueAfterMs`, reconcile again once it is so. No children prunes every child the
 * plugin made for the key. */
export const desired = (children = [], { status, requeueAfterMs } = {}) =>
  ({ [DESIRED]: true, children, status, requeueAfterMs });

/**
 * The plugin's exports: `describe`, `reconcile` and `map`. `reconcile(request)` gets
 * `{ kind, namespace, name, attempt }` and returns `desired(children, { status })`, or nothing
 * (done) or `requeueAfter(ms)` when it wrote itself;
 * `mapFn(kind, object)`, for plugins that watch other kinds, returns `{ namespace, name }` keys
 * (what it throws retries the change with backoff).
 */
export function reconciler(registration, reconcileFn, mapFn = () => []) {
  return {
    describe: () => registration.raw,
    reconcile: (request) => {
      const req = {
        kind: Kind.fromGvk(request.kind), namespace: request.key.namespace ?? undefined,
        name: request.key.name, attempt: request.attempt,
      };
      let result;
      try {
        result = reconcileFn(req);
      } catch (e) {
        // A thrown non-Error value is the WIT `err` of `result<reconciled, reconcile-error>`.
        throw reconcileError(e);
      }
      const action = result && result.requeueAfterMs !== undefined
        ? { tag: 'requeue-after', val: millis(result.requeueAfterMs) } : { tag: 'done' };
      if (!result || !result[DESIRED]) return { desired: undefined, action };
      const status = result.status === undefined ? undefined : toBytes(result.status);
      return { desired: { children: result.children.map(toBytes), status }, action };
    },
    map: (kind, object) => {
      let keys;
      try {
        keys = mapFn(Kind.fromGvk(kind), fromBytes(object));
      } catch (e) {
        throw hostErrorOf(e);
      }
      return keys.map(({ namespace, name }) => ({ namespace: namespace ?? undefined, name }));
    },
  };
}

function withKind(kind, object) {
  object.apiVersion ??= kind.apiVersion;
  object.kind ??= kind.kind;
  return object;
}

/** Reads of the host's informer cache: local, synchronous, never an API call. */
export const cache = {
  /** The cached object `name` (in `namespace`; none for cluster-scoped kinds), or `undefined`. */
  get(kind, name, namespace) {
    const bytes = call(hostCache.get, kind.gvk, namespace, name);
    return bytes === undefined || bytes === null ? undefined : withKind(kind, fromBytes(bytes));
  },
  /** One page of the cached objects of `kind` (namespace/name order): `{ items, continueToken }`
   * (`continueToken` undefined on the last). Options: `namespace`, `labelSelector`,
   * `fieldSelector` (`metadata.name` / `metadata.namespace`), `limit`, `continueToken`. */
  listPage(kind, { namespace, labelSelector, fieldSelector, limit, continueToken } = {}) {
    const page = call(hostCache.list, kind.gvk, {
      namespace, labelSelector, fieldSelector, limit, continueToken,
    });
    return { items: page.items.map((b) => withKind(kind, fromBytes(b))), continueToken: page.continueToken ?? undefined };
  },
  /** Every matching cached object of `kind`, read `pageSize` at a time (a generator), so the
   * plugin holds one page at once rather than the whole kind. */
  * iterate(kind, { pageSize = 100, ...options } = {}) {
    let continueToken;
    do {
      const page = cache.listPage(kind, { ...options, limit: pageSize, continueToken });
      yield* page.items;
      continueToken = page.continueToken;
    } while (continueToken !== undefined);
  },
  /** Cached objects of `kind`, optionally in one namespace and matching a label selector (and
   * `{ fieldSelector }`), in one page. */
  list(kind, namespace, selector, { fieldSelector } = {}) {
    return cache.listPage(kind, { namespace, labelSelector: selector, fieldSelector }).items;
  },
  /** Cached objects of `kind` whose index `index` has `value`. */
  byIndex(kind, index, value) {
    return call(hostCache.byIndex, kind.gvk, index, value).map((b) => withKind(kind, fromBytes(b)));
  },
};

/** Preconditions for a patch or delete from `object` as read: its uid and, unless
 * `resourceVersion` is false, its resourceVersion. The write then acts on that very object and no
 * newer one; a failure is a `conflict` HostError. */
export function preconditionsOf(object, { resourceVersion = true } = {}) {
  const meta = object?.metadata ?? {};
  return { resourceVersion: resourceVersion ? meta.resourceVersion : undefined, uid: meta.uid };
}

const wirePreconditions = ({ resourceVersion, uid } = {}) => ({
  resourceVersion: resourceVersion ?? undefined, uid: uid ?? undefined,
});

/** Writes through the host (field manager `kubewasm/<plugin>`) and uncached reads. Options of
 * `patch`, `patchStatus`: `namespace`, `patchType` (`merge` default, `json`, `strategic`),
 * `preconditions` (`{ resourceVersion, uid }`, see `preconditionsOf`). */
export const client = {
  /** Server-side applies `object`; returns the stored object. */
  apply: (object, { force = false } = {}) => fromBytes(call(hostClient.apply, toBytes(object), force)),
  /** Server-side applies the status of `object`; `force` takes over status fields other
   * managers own (a `conflict` HostError otherwise). */
  applyStatus: (object, { force = false } = {}) => fromBytes(call(hostClient.applyStatus, toBytes(object), force)),
  /** Creates `object`; a `conflict` HostError if it exists. */
  create: (object) => fromBytes(call(hostClient.create, toBytes(object))),
  /** Patches an object, if it meets `preconditions`; returns the stored object. */
  patch: (kind, name, body, { namespace, patchType = 'merge', preconditions } = {}) => fromBytes(
    call(hostClient.patch, kind.gvk, namespace, name, patchType, toBytes(body), wirePreconditions(preconditions))),
  /** Patches the status subresource of an object (controller-runtime's `Status().Patch`). */
  patchStatus: (kind, name, body, { namespace, patchType = 'merge', preconditions } = {}) => fromBytes(
    call(hostClient.patchStatus, kind.gvk, namespace, name, patchType, toBytes(body), wirePreconditions(preconditions))),
  /** Deletes an object if it meets `preconditions`; one that is already gone is not an error.
   * `propagationPolicy`: `background` (default), `foreground` or `orphan`. */
  delete(kind, name, namespace, { preconditions, propagationPolicy } = {}) {
    try {
      call(hostClient.delete, kind.gvk, namespace, name, {
        preconditions: wirePreconditions(preconditions), propagationPolicy,
      });
    } catch (e) {
      if (!(e instanceof HostError && e.reason === 'not-found')) throw e;
    }
  },
  /** The object read from the API server, past the cache (for reads that must see a write the
   * cache may not have caught up with), or `undefined`. Costs an API call. */
  get(kind, name, namespace) {
    const bytes = call(hostClient.get, kind.gvk, namespace, name);
    return bytes === undefined || bytes === null ? undefined : withKind(kind, fromBytes(bytes));
  },
};

/** A reference to `object` for events. */
export function objectRef(object) {
  const meta = object.metadata ?? {};
  return { kind: Kind.of(object).gvk, key: { namespace: meta.namespace ?? undefined, name: meta.name ?? '' } };
}

/** Kubernetes Events about objects, reported by controller `kubewasm/<plugin>`. */
export const events = {
  /** A routine event about `regarding` (`reason` UpperCamelCase, `note` a sentence). */
  normal: (regarding, reason, note) => call(hostEvents.publish, objectRef(regarding), 'normal', reason, note),
  /** An event about `regarding` that needs a person's attention. */
  warning: (regarding, reason, note) => call(hostEvents.publish, objectRef(regarding), 'warning', reason, note),
};

/** Log lines in the host's log, under the plugin's name and the key being reconciled. */
export const log = Object.fromEntries(
  ['trace', 'debug', 'info', 'warn', 'error'].map((level) => [level, (message) => hostLog.log(level, message)]),
);

/** The operator's settings over `defaults`; with `strict` (default) an unknown key throws, so a
 * typo never silently falls back to a default. */
export function settings(defaults = {}, { strict = true } = {}) {
  const given = fromBytes(hostConfig.settings());
  const unknown = Object.keys(given).filter((k) => !(k in defaults)).sort();
  if (strict && unknown.length) throw new Error(`unknown settings: ${unknown.join(', ')}`);
  return { ...defaults, ...given };
}

/** An ownerReference making `owner` the controller of an object, so the host's Owns trigger and
 * the garbage collector follow it. */
export function controllerReference(owner) {
  const meta = owner.metadata ?? {};
  return {
    apiVersion: owner.apiVersion, kind: owner.kind, name: meta.name ?? '', uid: meta.uid ?? '',
    controller: true, blockOwnerDeletion: true,
  };
}

/** Whether `owner` (by UID) is the controller of `object`. */
export function isControlledBy(object, owner) {
  const uid = owner?.metadata?.uid;
  return (object?.metadata?.ownerReferences ?? []).some((r) => r.controller === true && r.uid === uid);
}

// Finalizers (controller-runtime's `controllerutil` finalizer helpers, kube-rs' `finalizer`).
// Every write is a merge patch of the whole `metadata.finalizers` list (a merge patch replaces
// lists) with the object's resourceVersion and uid as preconditions: a write decided on a cached
// copy never drops a finalizer another controller added meanwhile, nor touches a new object of
// the same name. A failed precondition throws a `conflict` HostError: let it fail the reconcile.

/** The finalizers of `object`. */
export const finalizersOf = (object) => [...(object?.metadata?.finalizers ?? [])];

/** Whether `object` carries `finalizer`. */
export const hasFinalizer = (object, finalizer) => finalizersOf(object).includes(finalizer);

/** Whether `object` is being deleted (has a `deletionTimestamp`). */
export const isDeleting = (object) => Boolean(object?.metadata?.deletionTimestamp);

function writeFinalizers(kind, object, finalizers) {
  const { name = '', namespace } = object.metadata ?? {};
  return client.patch(kind, name, { metadata: { finalizers } }, { namespace, preconditions: preconditionsOf(object) });
}

/** Adds `finalizer` to `object` (of `kind`, as read) unless it has it; returns the object as
 * stored. A `conflict` HostError if the object changed since it was read. */
export function addFinalizer(kind, object, finalizer) {
  const list = finalizersOf(object);
  return list.includes(finalizer) ? object : writeFinalizers(kind, object, [...list, finalizer]);
}

/** Removes `finalizer` from `object` (of `kind`, as read) if it has it; returns the object as
 * stored, or `undefined` if that removal let it go. A `conflict` HostError if it changed since. */
export function removeFinalizer(kind, object, finalizer) {
  const list = finalizersOf(object);
  if (!list.includes(finalizer)) return object;
  try {
    return writeFinalizers(kind, object, list.filter((f) => f !== finalizer));
  } catch (e) {
    if (e instanceof HostError && e.reason === 'not-found') return undefined;
    throw e;
  }
}

/**
 * Runs `apply(object)` with `finalizer` in place, or `cleanup(object)` when the object is being
 * deleted. A live object without the finalizer gets it first (`apply` sees the stored object);
 * an object being deleted that carries it gets `cleanup`, and the finalizer is removed once
 * `cleanup` returned (a throw keeps it, so the cleanup is retried); one being deleted without it
 * is left alone. Returns what `apply` or `cleanup` returned (e.g. `requeueAfter(ms)`).
 */
export function finalize(kind, object, finalizer, { apply, cleanup }) {
  if (!isDeleting(object)) return apply(addFinalizer(kind, object, finalizer));
  if (!hasFinalizer(object, finalizer)) return undefined;
  const result = cleanup(object);
  removeFinalizer(kind, object, finalizer);
  return result;
}
