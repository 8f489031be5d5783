// conditions.js: meta.SetStatusCondition semantics.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  findStatusCondition, isStatusConditionTrue, newCondition, removeStatusCondition, setStatusCondition,
} from '../conditions.js';

test('the transition time moves only when the status changes', () => {
  const conditions = [];
  assert.ok(setStatusCondition(conditions, newCondition('Ready', false, 'Waiting', '', 1), 'T1'));
  assert.ok(setStatusCondition(conditions, newCondition('Ready', false, 'Still', 'm', 2), 'T2'));
  const ready = findStatusCondition(conditions, 'Ready');
  assert.deepEqual([ready.lastTransitionTime, ready.reason, ready.observedGeneration], ['T1', 'Still', 2]);
  assert.ok(setStatusCondition(conditions, newCondition('Ready', true, 'Done', 'm', 2), 'T3'));
  assert.equal(findStatusCondition(conditions, 'Ready').lastTransitionTime, 'T3');
  assert.ok(isStatusConditionTrue(conditions, 'Ready'));
});

test('setting an identical condition changes nothing', () => {
  const conditions = [];
  setStatusCondition(conditions, newCondition('Ready', true, 'Done', 'ok', 3));
  assert.equal(setStatusCondition(conditions, newCondition('Ready', true, 'Done', 'ok', 3), 'later'), false);
  assert.equal(conditions.length, 1);
  assert.notEqual(conditions[0].lastTransitionTime, 'later');
});

test('a new condition is stamped now in RFC 3339 seconds', () => {
  const conditions = [];
  setStatusCondition(conditions, newCondition('Ready', 'Unknown', 'Starting'));
  assert.match(conditions[0].lastTransitionTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.equal('observedGeneration' in conditions[0], false);
});

test('one condition per type, and remove drops it', () => {
  const conditions = [];
  setStatusCondition(conditions, newCondition('Ready', true, 'Done'));
  setStatusCondition(conditions, newCondition('Degraded', false, 'Fine'));
  assert.deepEqual(conditions.map((c) => c.type), ['Ready', 'Degraded']);
  assert.ok(removeStatusCondition(conditions, 'Ready'));
  assert.equal(removeStatusCondition(conditions, 'Ready'), false);
  assert.equal(isStatusConditionTrue(conditions, 'Ready'), false);
});
