//! [`map`]: a function over a list on every core, for the examples that run many cells.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of each item, in the items' order, computed by one worker per core taking items in turn.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { return };
                    let r = f(item);
                    out.lock().unwrap()[i] = Some(r);
                }
            });
        }
    });
    out.into_inner().unwrap().into_iter().map(|r| r.expect("every item mapped")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_item_is_mapped_once_in_order() {
        let items: Vec<u64> = (0..100).collect();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let out = super::map(&items, |&x| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            x * x
        });
        assert_eq!(out, (0..100).map(|x| x * x).collect::<Vec<u64>>());
        assert_eq!(calls.into_inner(), 100);
        assert!(super::map(&[] as &[u8], |_| 0).is_empty());
    }
}
