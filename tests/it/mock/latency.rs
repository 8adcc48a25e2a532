//! The latency model on the wall clock, with short steps and wide tolerances: more running
//! streams make every token slower, requests over the batch limit queue, TTFT grows with
//! the prompt. The precise curves are virtual-clock unit tests (crates/mock/src/simulate.rs).

use orchestrate_mock::{Curve, MockConfig, Preset};
use serde_json::json;

use super::client::*;

/// Mean time per output token after the first, of one streamed request.
fn mean_itl_ms(events: &[Event]) -> f64 {
    let t = token_events(events);
    let words = chunk_words(events);
    let after_first: usize = words[1..].iter().sum();
    (t.last().unwrap().at - t[0].at).as_secs_f64() * 1e3 / after_first as f64
}

#[tokio::test]
async fn more_running_streams_make_every_token_slower() {
    let mut config = MockConfig::new(Preset::Fixed);
    // 4 ms alone, 4 + 0.5 ms per extra sequence: 19.5 ms with 32 streams.
    config.latency.decode = Curve::linear(3.5, 0.5);
    let server = Server::start(config).await;
    let body = json!({"prompt": "p", "max_tokens": 20, "ignore_eos": true, "stream": true});
    let (_, _, alone) = stream(server.addr, "/v1/completions", body.clone()).await;
    let crowd: Vec<_> = (0..32)
        .map(|_| tokio::spawn(stream(server.addr, "/v1/completions", body.clone())))
        .collect();
    let mut crowded = Vec::new();
    for h in crowd {
        crowded.push(mean_itl_ms(&h.await.unwrap().2));
    }
    let crowded = crowded.iter().sum::<f64>() / crowded.len() as f64;
    let alone = mean_itl_ms(&alone);
    assert!(alone < 12.0, "alone {alone} ms");
    assert!(
        crowded > alone * 2.0,
        "32 streams {crowded} ms vs alone {alone} ms"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn requests_over_max_batch_queue_for_a_slot() {
    let mut config = fast(10.0);
    config.latency.max_batch = 2;
    let server = Server::start(config).await;
    let body = json!({"prompt": "p", "max_tokens": 20, "ignore_eos": true, "stream": true});
    let tasks: Vec<_> = (0..4)
        .map(|_| tokio::spawn(stream(server.addr, "/v1/completions", body.clone())))
        .collect();
    let mut ttfts = Vec::new();
    for t in tasks {
        let (sent, _, events) = t.await.unwrap();
        ttfts.push((token_events(&events)[0].at - sent).as_secs_f64() * 1e3);
    }
    ttfts.sort_by(f64::total_cmp);
    // Two start at once; two wait for a whole generation (20 steps x 10 ms).
    assert!(ttfts[1] < 100.0, "{ttfts:?}");
    assert!(ttfts[2] > 190.0, "{ttfts:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn ttft_grows_with_prompt_length() {
    let mut config = fast(2.0);
    config.latency.prefill = "0:0,1000:100".parse().unwrap();
    let server = Server::start(config).await;
    let ttft = |words: usize| {
        let body = json!({"prompt": vec!["w"; words].join(" "), "max_tokens": 2, "stream": true});
        async move {
            let (sent, _, events) = stream(server.addr, "/v1/completions", body.clone()).await;
            (token_events(&events)[0].at - sent).as_secs_f64() * 1e3
        }
    };
    let short = ttft(10).await;
    let long = ttft(2000).await;
    assert!(short < 100.0, "{short} ms");
    assert!(long > 190.0, "{long} ms");
    server.stop().await.unwrap();
}

/// The wall-clock server and the virtual-clock simulation are the same model: 8 concurrent
/// 1,000-token prompts on the H20 preset at speed 2 give the TTFT and TPOT `simulate`
/// predicts: TPOT within 20%, TTFT within 50% (the requests reach the engine a little
/// apart, so some wait for the step in flight; the simulation starts them together). Speed 2
/// keeps the steps (~15 ms) well above the scheduling noise of a loaded 2-core machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h20_preset_on_the_wall_clock_matches_its_simulation() {
    let speed = 2.0;
    let mut config = MockConfig::new(Preset::H20VllmTp16);
    config.speed = speed;
    let predicted = orchestrate_mock::simulate(
        &config.latency,
        orchestrate_mock::ClosedLoop {
            concurrency: 8,
            requests: 8,
            input_tokens: 1000,
            output_tokens: 40,
        },
    );
    let server = Server::start(config).await;
    let body = json!({"prompt": vec!["w"; 1000].join(" "), "max_tokens": 40, "ignore_eos": true,
                      "stream": true});
    let tasks: Vec<_> = (0..8)
        .map(|_| tokio::spawn(stream(server.addr, "/v1/completions", body.clone())))
        .collect();
    let (mut ttft, mut tpot) = (0.0, 0.0);
    for t in tasks {
        let (sent, _, events) = t.await.unwrap();
        ttft += (token_events(&events)[0].at - sent).as_secs_f64() * 1e3 / 8.0;
        tpot += mean_itl_ms(&events) / 8.0;
    }
    server.stop().await.unwrap();
    let (want_ttft, want_tpot) = (
        predicted.mean_ttft_ms / speed,
        predicted.mean_tpot_ms / speed,
    );
    assert!(
        (ttft - want_ttft).abs() / want_ttft < 0.5,
        "TTFT {ttft:.1} ms vs simulated {want_ttft:.1} ms"
    );
    assert!(
        (tpot - want_tpot).abs() / want_tpot < 0.2,
        "TPOT {tpot:.2} ms vs simulated {want_tpot:.2} ms"
    );
}
