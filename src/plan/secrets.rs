//! `${{ secrets.NAME }}` in env values: looked up in orchestrate's environment when the
//! plan is built, kept out of template rendering by placeholders, and carried as
//! `EnvValue::Secret` so every printed or written form shows `***`.

use serde_saphyr::Spanned;

use super::PlanError;
use super::build::Builder;
use crate::spec::TASK_SOURCE;

/// Opens a secret reference.
pub(super) const SECRET_OPEN: &str = "${{";

/// One env entry after secret resolution: the template with secrets as placeholders.
pub(super) struct EnvTemplate {
    pub name: String,
    pub value: Spanned<String>,
    pub secrets: Vec<(String, String)>,
}

impl Builder<'_> {
    /// Replace `${{ secrets.NAME }}` in env values by placeholders and look the values up.
    pub(super) fn resolve_secrets(
        &self,
        env: &[crate::spec::values::EnvEntry],
    ) -> Result<Vec<EnvTemplate>, PlanError> {
        let mut out = Vec::new();
        for e in env {
            let mut text = String::new();
            let mut rest = e.value.value.as_str();
            let mut secrets = Vec::new();
            while let Some(start) = rest.find(SECRET_OPEN) {
                text.push_str(&rest[..start]);
                let after = &rest[start + SECRET_OPEN.len()..];
                let Some(end) = after.find("}}") else {
                    return Err(self
                        .at(
                            TASK_SOURCE,
                            e.value.referenced,
                            format!("unclosed `${{{{` in env `{}`", e.name),
                        )
                        .with_help("write ${{ secrets.NAME }}")
                        .into());
                };
                let inner = after[..end].trim();
                let Some(sname) = inner.strip_prefix("secrets.").map(str::trim) else {
                    return Err(self
                        .at(
                            TASK_SOURCE,
                            e.value.referenced,
                            format!("`${{{{ {inner} }}}}` is not a secret reference"),
                        )
                        .with_help("write ${{ secrets.NAME }}")
                        .into());
                };
                let value = std::env::var(sname).map_err(|_| {
                    self.at(
                        TASK_SOURCE,
                        e.value.referenced,
                        format!("secret `{sname}` is not set"),
                    )
                    .with_help(format!(
                        "export {sname}=... in the environment that runs orchestrate"
                    ))
                })?;
                text.push_str(&placeholder(sname));
                secrets.push((sname.to_string(), value));
                rest = &after[end + 2..];
            }
            text.push_str(rest);
            out.push(EnvTemplate {
                name: e.name.clone(),
                value: Spanned {
                    value: text,
                    referenced: e.value.referenced,
                    defined: e.value.defined,
                },
                secrets,
            });
        }
        Ok(out)
    }
}

/// Stands for secret `name` inside a template until the value is put back.
pub(super) fn placeholder(name: &str) -> String {
    format!("\u{1}secret:{name}\u{1}")
}
