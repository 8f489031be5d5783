//! A spare instance: made in the background before a call needs it, dropped when none came.
//!
//! A source plugin's fresh instance imports the plugin's code before every call (about 1 ms in
//! Python and JavaScript). The spare moves that import off the call's path without giving up a
//! fresh instance: after a call takes an instance, one more is made in the background with a
//! permit of the plugin's own share (so it never holds a slot another plugin reserved), and the
//! next call starts on it. It has served no call, so it is as fresh as one made for the call. A
//! spare no call took within [`SPARE_KEEP`] is dropped: an idle plugin holds no instance.
//! Generic over what is made, so its timing is tested in virtual time without wasm.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::pool::Share;

/// How long a spare no call took is kept: long enough for the next key of a burst, short
/// enough that an idle plugin gives its memory back.
pub(crate) const SPARE_KEEP: Duration = Duration::from_secs(10);

/// Makes a spare with the permit it will hold; `None` if it could not be made.
type Make<T> = Box<dyn Fn(OwnedSemaphorePermit) -> Pin<Box<dyn Future<Output = Option<T>> + Send>> + Send + Sync>;

/// One plugin version's spare and what making one takes.
pub(crate) struct Spare<T> {
    /// The spare, if one is ready. Declared before `share`: it drops first, and the share gives
    /// its slots back to the pool only after.
    slot: parking_lot::Mutex<Option<T>>,
    /// Woken when a spare is put in `slot`: a call waiting for a permit of a full share takes it.
    ready: Notify,
    /// Whether a spare is being made.
    making: AtomicBool,
    /// Counts the spares made, so an expiry drops only the spare it was set for.
    made: AtomicU64,
    make: Make<T>,
    share: Arc<Share>,
}

/// What a call got while it waited at its plugin's share.
pub(crate) enum Ready<T> {
    /// A permit: the call makes its instance.
    Permit(OwnedSemaphorePermit),
    /// A spare, made while it waited.
    Spare(T),
}

impl<T: Send + 'static> Spare<T> {
    /// No spare yet; `make` makes one with a permit of `share`.
    pub(crate) fn new(
        share: Arc<Share>,
        make: impl Fn(OwnedSemaphorePermit) -> Pin<Box<dyn Future<Output = Option<T>> + Send>> + Send + Sync + 'static,
    ) -> Self {
        Spare {
            slot: Default::default(),
            ready: Notify::new(),
            making: AtomicBool::new(false),
            made: AtomicU64::new(0),
            make: Box::new(make),
            share,
        }
    }

    /// The spare, if one is ready.
    pub(crate) fn take(&self) -> Option<T> {
        self.slot.lock().take()
    }

    /// Waits for a permit of the share or a spare, whichever comes first: a spare holds a
    /// permit, so a call waiting only for permits could wait for the one a spare holds.
    pub(crate) async fn permit_or_spare(&self) -> Ready<T> {
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            if let Some(spare) = self.take() {
                return Ready::Spare(spare);
            }
            tokio::select! {
                permit = self.share.acquire() => return Ready::Permit(permit),
                () = &mut ready => {}
            }
        }
    }

    /// Starts making a spare unless one is ready or being made. One that cannot be made is
    /// not tried again until the next call.
    pub(crate) fn refill(self: &Arc<Self>) {
        if self.slot.lock().is_some() || self.making.swap(true, Ordering::AcqRel) {
            return;
        }
        let spare = self.clone();
        tokio::spawn(async move {
            let permit = spare.share.acquire().await;
            // Unless the version was dropped while this waited: nobody would take the spare.
            if Arc::strong_count(&spare) > 1
                && let Some(made) = (spare.make)(permit).await
            {
                *spare.slot.lock() = Some(made);
                let number = spare.made.fetch_add(1, Ordering::AcqRel) + 1;
                spare.ready.notify_waiters();
                Self::expire(Arc::downgrade(&spare), number);
            }
            spare.making.store(false, Ordering::Release);
        });
    }

    /// Drops spare number `number` if no call took it within [`SPARE_KEEP`].
    fn expire(spare: Weak<Self>, number: u64) {
        tokio::spawn(async move {
            tokio::time::sleep(SPARE_KEEP).await;
            let Some(spare) = spare.upgrade() else { return };
            let mut slot = spare.slot.lock();
            if spare.made.load(Ordering::Acquire) == number {
                slot.take();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PluginMetrics;
    use crate::pool::{Ledger, Weight};

    /// A spare of `instances` permits whose spares are numbered 1, 2, … in the order made.
    fn spare(instances: u32) -> (Arc<Spare<(u32, OwnedSemaphorePermit)>>, Arc<AtomicU64>) {
        let ledger = Ledger::new(8, None, PluginMetrics::default());
        let share = Arc::new(ledger.reserve("a", Weight { slots: 1, bytes: 0 }, instances).unwrap());
        let counter = Arc::new(AtomicU64::new(0));
        let count = counter.clone();
        let spare = Spare::new(share, move |permit| {
            let n = count.fetch_add(1, Ordering::AcqRel) + 1;
            Box::pin(async move { Some((n as u32, permit)) })
        });
        (Arc::new(spare), counter)
    }

    /// Lets the spawned tasks run until they wait (virtual time does not move).
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refill_makes_one_spare_and_a_second_refill_makes_none_while_it_waits() {
        let (spare, made) = spare(2);
        spare.refill();
        spare.refill();
        settle().await;
        spare.refill();
        settle().await;
        assert_eq!(made.load(Ordering::Acquire), 1);
        assert_eq!(spare.take().map(|s| s.0), Some(1));
        assert!(spare.take().is_none(), "a spare is taken once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_spare_no_call_takes_is_dropped_after_the_keep_and_its_permit_given_back() {
        let (spare, _) = spare(1);
        spare.refill();
        settle().await;
        assert_eq!(spare.share.available(), 0, "the spare holds the share's permit");
        tokio::time::sleep(SPARE_KEEP - Duration::from_millis(1)).await;
        settle().await;
        assert!(spare.slot.lock().is_some(), "kept until the keep is over");
        tokio::time::sleep(Duration::from_millis(2)).await;
        settle().await;
        assert!(spare.slot.lock().is_none(), "dropped after it");
        assert_eq!(spare.share.available(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expiry_leaves_a_newer_spare_alone() {
        let (spare, _) = spare(1);
        spare.refill();
        settle().await;
        tokio::time::sleep(SPARE_KEEP / 2).await;
        drop(spare.take());
        spare.refill();
        settle().await;
        tokio::time::sleep(SPARE_KEEP / 2 + Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(spare.take().map(|s| s.0), Some(2), "the first spare's expiry did not drop the second");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waiting_at_a_full_share_takes_the_spare_made_with_the_permit_it_waited_for() {
        let (spare, _) = spare(1);
        let call = spare.share.acquire().await;
        // The refill waits for the permit the call holds; a second call waits too.
        spare.refill();
        settle().await;
        let waiting = tokio::spawn({
            let spare = spare.clone();
            async move { spare.permit_or_spare().await }
        });
        settle().await;
        drop(call);
        let got = tokio::time::timeout(Duration::from_secs(1), waiting).await.expect("not left waiting").unwrap();
        assert!(matches!(got, Ready::Spare((1, _))), "the waiting call took the spare");
    }

    #[tokio::test(start_paused = true)]
    async fn a_spare_made_after_its_version_was_dropped_is_not_made() {
        let (spare, made) = spare(1);
        let call = spare.share.acquire().await;
        spare.refill();
        settle().await;
        let share = spare.share.clone();
        drop(spare);
        drop(call);
        settle().await;
        assert_eq!(made.load(Ordering::Acquire), 0);
        assert_eq!(share.available(), 1, "the permit went back");
    }
}
