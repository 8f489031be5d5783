//! `Lanes`: the event sink's queues, one lane per plugin and one for the host, each bounded, its
//! reports ahead of its Events, taken in turn.
//!
//! Hand-written: tokio's and crossbeam's channels are one FIFO each; none keeps a bounded queue
//! per sender and hands out their items round-robin, which is what keeps one plugin's flood from
//! dropping (or delaying) another's Events and the host's reports.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

/// Whose queue an event waits in: a plugin's (its Events and the host's reports about its calls)
/// or the host's own.
pub(super) type Lane = Option<String>;

/// What an event is within its lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tier {
    /// Reported by the host (`AccessDenied`, `WriteRejected`, the host's own): taken first,
    /// and never dropped to make room for, or because of, a plugin's Events.
    Report,
    /// Published by a plugin: droppable under load (WIT: "best-effort").
    Event,
}

/// One lane's two queues.
struct Queues<T> {
    reports: VecDeque<T>,
    events: VecDeque<T>,
}

impl<T> Queues<T> {
    fn is_empty(&self) -> bool {
        self.reports.is_empty() && self.events.is_empty()
    }
}

/// Bounded queues per lane, drained one item per lane in turn.
pub(super) struct Lanes<T> {
    /// Items each of a lane's two queues holds at most.
    capacity: usize,
    lanes: HashMap<Lane, Queues<T>>,
    /// The lanes holding items, in the order they are taken from; each appears once.
    turn: VecDeque<Lane>,
}

impl<T> Lanes<T> {
    /// Empty lanes of `capacity` reports and `capacity` Events each.
    pub(super) fn new(capacity: usize) -> Self {
        Self { capacity, lanes: HashMap::new(), turn: VecDeque::new() }
    }

    /// Queues `item` in `lane`; gives it back if its queue there is full.
    pub(super) fn push(&mut self, lane: Lane, tier: Tier, item: T) -> Result<(), T> {
        let queues = match self.lanes.entry(lane) {
            Entry::Occupied(queues) => queues.into_mut(),
            Entry::Vacant(slot) => {
                self.turn.push_back(slot.key().clone());
                slot.insert(Queues { reports: VecDeque::new(), events: VecDeque::new() })
            }
        };
        let queue = match tier {
            Tier::Report => &mut queues.reports,
            Tier::Event => &mut queues.events,
        };
        if queue.len() >= self.capacity {
            return Err(item);
        }
        queue.push_back(item);
        Ok(())
    }

    /// Up to `max` items, one from each lane in turn (its reports first), so a lane with many
    /// waiting gets no more of a batch than one with few while both have any.
    pub(super) fn take(&mut self, max: usize) -> Vec<T> {
        let mut batch = Vec::with_capacity(max.min(self.len()));
        while batch.len() < max {
            let Some(lane) = self.turn.pop_front() else { break };
            let Some(queues) = self.lanes.get_mut(&lane) else { continue };
            if let Some(item) = queues.reports.pop_front().or_else(|| queues.events.pop_front()) {
                batch.push(item);
            }
            if queues.is_empty() {
                self.lanes.remove(&lane); // a plugin gone leaves nothing behind
            } else {
                self.turn.push_back(lane);
            }
        }
        batch
    }

    /// Items waiting in every lane.
    pub(super) fn len(&self) -> usize {
        self.lanes.values().map(|q| q.reports.len() + q.events.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(plugin: &str) -> Lane {
        Some(plugin.to_owned())
    }

    #[test]
    fn a_full_lane_refuses_only_its_own_tier_and_lane() {
        let mut lanes = Lanes::new(2);
        assert_eq!(lanes.push(lane("a"), Tier::Event, 1), Ok(()));
        assert_eq!(lanes.push(lane("a"), Tier::Event, 2), Ok(()));
        assert_eq!(lanes.push(lane("a"), Tier::Event, 3), Err(3), "a's Events are full");
        assert_eq!(lanes.push(lane("a"), Tier::Report, 4), Ok(()), "a's reports have room of their own");
        assert_eq!(lanes.push(lane("b"), Tier::Event, 5), Ok(()), "b has a lane of its own");
        assert_eq!(lanes.push(None, Tier::Report, 6), Ok(()), "so has the host");
        assert_eq!(lanes.len(), 5);
    }

    #[test]
    fn lanes_are_taken_in_turn_and_a_lanes_reports_before_its_events() {
        let mut lanes = Lanes::new(10);
        for i in 0..5 {
            lanes.push(lane("a"), Tier::Event, format!("a{i}")).unwrap();
        }
        lanes.push(lane("b"), Tier::Event, "b0".to_owned()).unwrap();
        lanes.push(lane("a"), Tier::Report, "a-report".to_owned()).unwrap();
        lanes.push(None, Tier::Report, "host".to_owned()).unwrap();
        assert_eq!(lanes.take(4), ["a-report", "b0", "host", "a0"]);
        assert_eq!(lanes.take(10), ["a1", "a2", "a3", "a4"]);
        assert!(lanes.take(10).is_empty());
        assert!(lanes.lanes.is_empty() && lanes.turn.is_empty(), "emptied lanes are forgotten");
    }
}
