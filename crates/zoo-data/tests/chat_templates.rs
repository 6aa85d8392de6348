//! Real chat templates (Llama 3.2 Instruct, Qwen2.5 Instruct, Gemma 2 IT, as their
//! `tokenizer_config.json` ship them) render conversations exactly as `transformers`'
//! `apply_chat_template` does, with and without the generation prompt, and a template's
//! own refusal comes back as an error with its message. The references are written by
//! `xtask/fixtures/chat.py`.

use std::path::Path;

use serde_json::Value;
use zoo_data::ChatTemplate;

const TEMPLATES: [&str; 3] = ["llama-3.2-instruct", "qwen2.5-instruct", "gemma-it"];

#[test]
fn real_templates_render_as_transformers_renders_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat");
    let mut checked = 0;
    for name in TEMPLATES {
        let dir = root.join(name);
        let template = ChatTemplate::from_pretrained(&dir).unwrap().unwrap();
        let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
        let expected: Value = serde_json::from_str(&text).unwrap();
        let extra = expected["extra"].as_object().unwrap();
        for case in expected["cases"].as_array().unwrap() {
            let add = case["add_generation_prompt"].as_bool().unwrap();
            let got = template.render_with(&case["messages"], add, extra);
            match (&case["rendered"], &case["error"]) {
                (Value::String(want), _) => {
                    assert_eq!(&got.unwrap(), want, "{name}, {}", case["messages"]);
                }
                (_, Value::String(error)) => {
                    let e = got.unwrap_err().to_string();
                    assert!(e.ends_with(error.as_str()), "{name}: {e}");
                }
                _ => panic!("{name}: a case with neither a rendering nor an error"),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 18);
}

#[test]
fn the_special_tokens_come_from_tokenizer_config_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat");
    let llama = ChatTemplate::from_pretrained(root.join("llama-3.2-instruct"))
        .unwrap()
        .unwrap();
    assert_eq!(llama.special_token("bos_token"), Some("<|begin_of_text|>"));
    assert_eq!(llama.special_token("eos_token"), Some("<|eot_id|>"));
    let qwen = ChatTemplate::from_pretrained(root.join("qwen2.5-instruct"))
        .unwrap()
        .unwrap();
    assert_eq!(qwen.special_token("bos_token"), None);
    // A folder without a template has none; a chat_template.jinja wins over the config.
    let dir = std::env::temp_dir().join(format!("zoo-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(ChatTemplate::from_pretrained(&dir).unwrap(), None);
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"chat_template": "config", "bos_token": {"content": "<s>", "lstrip": false}}"#,
    )
    .unwrap();
    let t = ChatTemplate::from_pretrained(&dir).unwrap().unwrap();
    assert_eq!(
        (t.source(), t.special_token("bos_token")),
        ("config", Some("<s>"))
    );
    std::fs::write(dir.join("chat_template.jinja"), "{{ bos_token }}file").unwrap();
    let t = ChatTemplate::from_pretrained(&dir).unwrap().unwrap();
    assert_eq!(t.render(&serde_json::json!([]), false).unwrap(), "<s>file");
    std::fs::write(dir.join("tokenizer_config.json"), "{").unwrap();
    let e = ChatTemplate::from_pretrained(&dir).unwrap_err().to_string();
    assert!(e.contains("tokenizer_config.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
