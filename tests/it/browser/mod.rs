//! The console in headless Chromium: `scripts/test --tier browser`.

mod ui;
