// Write kubewasm reconcile plugins in JavaScript.
//
// A plugin is one ES module that exports what `reconciler` returns:
//
//   import { Kind, Registration, reconciler, cache, client } from '../../sdk/js/kubewasm.js';
//   const NAMESPACE = new Kind('v1', 'Namespace');
//   export const { describe, reconcile, map } = reconciler(
//     new Registration(NAMESPACE).owns(new Kind('v1', 'ConfigMap')),
//     (request) => { const ns = cache.get(NAMESPACE, request.name); ... });
//
// built with `jco componentize --bundle --wit wit/controller@0.1.0 --world-name controller`
// (`make plugins` does it). Objects are plain objects of the Kubernetes JSON; cache reads are
// local, writes go to the API server with field manager `kubewasm/<plugin>`. A failing host call
// throws a `HostError` (its `reason` says why); anything thrown out of the reconcile function
// becomes the reconcile's error and the key is retried with backoff. Every reconcile runs in a
// fresh instance: keep no state in module variables.

import * as hostCache from 'kubewasm:controller/cache@0.1.0';
import * as hostClient from 'kubewasm:controller/client@0.1.0';
import * as hostConfig from 'kubewasm:controller/config@0.1.0';
import * as hostEvents from 'kubewasm:controller/events@0.1.0';
import * as hostLog from 'kubewasm:controller/log@0.1.0';

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
  }
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

/** What the plugin reconciles, owns, watches, reads and writes; the setters chain. */
export class Registration {
  constructor(forKind, selector) {
    this.raw = {
      forKind: forKind.gvk, forLabelSelector: selector, owns: [], watches: [], reads: [],
      writes: [], indexes: [], maxConcurrent: undefined,
    };
  }

  /** Creates and controls objects of `kind` (a change enqueues the owner's key). */
  owns(kind) { this.raw.owns.push(kind.gvk); return this; }

  /** Watches `kind`; changes map to keys through the `map` function. */
  watches(kind, selector) { this.raw.watches.push({ kind: kind.gvk, labelSelector: selector }); return this; }

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

/** Reconcile again after `ms` milliseconds (return it from the reconcile function). */
export const requeueAfter = (ms) => ({ requeueAfterMs: ms });

/**
 * The plugin's exports: `describe`, `reconcile` and `map`. `reconcile(request)` gets
 * `{ kind, namespace, name, attempt }` and returns nothing (done) or `requeueAfter(ms)`;
 * `mapFn(kind, object)`, for plugins that watch other kinds, returns `{ namespace, name }` keys.
 */
export function reconciler(registration, reconcileFn, mapFn = () => []) {
  return {
    describe: () => registration.raw,
    reconcile: (request) => {
      const req = {
        kind: Kind.fromGvk(request.kind), namespace: request.key.namespace ?? undefined,
        name: request.key.name, attempt: request.attempt,
      };
      let action;
      try {
        action = reconcileFn(req);
      } catch (e) {
        // The thrown string is the WIT `err` of `result<action, string>`.
        throw e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      }
      if (action && action.requeueAfterMs !== undefined) {
        return { tag: 'requeue-after', val: BigInt(Math.max(0, Math.round(action.requeueAfterMs))) };
      }
      return { tag: 'done' };
    },
    map: (kind, object) => mapFn(Kind.fromGvk(kind), fromBytes(object))
      .map(({ namespace, name }) => ({ namespace: namespace ?? undefined, name })),
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
  /** Cached objects of `kind`, optionally in one namespace and matching a label selector. */
  list(kind, namespace, selector) {
    return call(hostCache.list, kind.gvk, namespace, selector).map((b) => withKind(kind, fromBytes(b)));
  },
  /** Cached objects of `kind` whose index `index` has `value`. */
  byIndex(kind, index, value) {
    return call(hostCache.byIndex, kind.gvk, index, value).map((b) => withKind(kind, fromBytes(b)));
  },
};

/** Writes through the host: server-side apply with field manager `kubewasm/<plugin>`. */
export const client = {
  /** Server-side applies `object`; returns the stored object. */
  apply: (object, { force = false } = {}) => fromBytes(call(hostClient.apply, toBytes(object), force)),
  /** Server-side applies the status of `object`. */
  applyStatus: (object) => fromBytes(call(hostClient.applyStatus, toBytes(object))),
  /** Creates `object`; a `conflict` HostError if it exists. */
  create: (object) => fromBytes(call(hostClient.create, toBytes(object))),
  /** Patches an object: `patchType` is `merge` (default), `json` or `strategic`. */
  patch: (kind, name, body, { namespace, patchType = 'merge' } = {}) =>
    fromBytes(call(hostClient.patch, kind.gvk, namespace, name, patchType, toBytes(body))),
  /** Deletes an object; one that is already gone is not an error. */
  delete(kind, name, namespace) {
    try {
      call(hostClient.delete, kind.gvk, namespace, name);
    } catch (e) {
      if (!(e instanceof HostError && e.reason === 'not-found')) throw e;
    }
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
