//! An image whose packages are over 30 days old (the app's clock shifted 31 days on): the footer
//! flags it, and the set-up steps say how old it is and offer the rebuild with current packages.

mod webdriver;

use std::time::Duration;
use webdriver::*;

#[test]
fn an_old_image_is_flagged_with_its_rebuild() {
    let data = tempfile::tempdir().unwrap();
    let offset = (31 * 86_400_000i64).to_string();
    let d =
        Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap()), ("BOTDESK_CLOCK_OFFSET_MS", &offset)]);
    d.wait_js(
        "the freshness check, flagged",
        "return [...document.querySelectorAll('.check.warn')].some(c => c.textContent.includes('Image freshness'))",
        Duration::from_secs(30),
    );
    // Still usable: nothing else is red, and no set-up modal forces itself open.
    assert_eq!(d.js("return document.querySelectorAll('.check.bad').length"), 0);
    d.js("[...document.querySelectorAll('.check.warn')].find(c => c.textContent.includes('Image freshness')).click(); return true");
    d.wait_js("the set-up steps", "return !!document.querySelector('.modal #build-image')", Duration::from_secs(10));
    let modal = d.js("return document.querySelector('.modal').textContent").as_str().unwrap().to_string();
    assert!(modal.contains("days old") && modal.contains("Rebuild with current packages") && modal.contains("--refresh"), "{modal}");
    screenshot("13-image-stale.png");
}
