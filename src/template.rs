//! minijinja with strict undefined, rendered on string fields after YAML parsing (so errors
//! point at the field in the user's file). `${{ secrets.NAME }}` is not a template: it is
//! protected before rendering and resolved by the plan.
//!
//! Owns: rendering one string and listing the variables it uses. Does not own: which
//! variables exist (plan) or where the string came from (spec).

use std::collections::BTreeSet;

use minijinja::{Environment, UndefinedBehavior, Value};

/// Errors rendering one string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("undefined template variable `{name}`")]
    Undefined { name: String },
    #[error("bad template: {message}")]
    Invalid { message: String },
}

/// A strict minijinja environment.
pub struct Renderer {
    env: Environment<'static>,
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a string holds template syntax at all.
pub fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%")
}

impl Renderer {
    pub fn new() -> Self {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        Self { env }
    }

    /// Top-level variables a template reads (empty for plain strings).
    pub fn variables(&self, source: &str) -> Result<BTreeSet<String>, TemplateError> {
        if !is_template(source) {
            return Ok(BTreeSet::new());
        }
        let t = self.env.template_from_str(source).map_err(invalid)?;
        Ok(t.undeclared_variables(false).into_iter().collect())
    }

    /// Render `source` with `ctx` (a map). Names the first undefined variable.
    pub fn render(&self, source: &str, ctx: &Value) -> Result<String, TemplateError> {
        if !is_template(source) {
            return Ok(source.to_string());
        }
        let t = self.env.template_from_str(source).map_err(invalid)?;
        let mut missing: Vec<String> = t
            .undeclared_variables(false)
            .into_iter()
            .filter(|name| ctx.get_attr(name).map_or(true, |v| v.is_undefined()))
            .collect();
        missing.sort();
        if let Some(name) = missing.into_iter().next() {
            return Err(TemplateError::Undefined { name });
        }
        t.render(ctx).map_err(invalid)
    }
}

fn invalid(e: minijinja::Error) -> TemplateError {
    let mut message = e.kind().to_string();
    if let Some(detail) = e.detail() {
        message = format!("{message}: {detail}");
    }
    TemplateError::Invalid { message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;

    #[test]
    fn renders_expressions_over_the_context() {
        let r = Renderer::new();
        let ctx = context! { concurrency => 8, model => "m" };
        assert_eq!(r.render("{{ concurrency * 4 }}", &ctx).unwrap(), "32");
        assert_eq!(
            r.render("serve {{ model }} --x", &ctx).unwrap(),
            "serve m --x"
        );
        assert_eq!(
            r.render("no template $HOME", &ctx).unwrap(),
            "no template $HOME"
        );
    }

    #[test]
    fn undefined_variables_are_named() {
        let r = Renderer::new();
        let err = r
            .render("--tp {{ tp }}", &context! { gpus => 8 })
            .unwrap_err();
        assert_eq!(err, TemplateError::Undefined { name: "tp".into() });
        let err = r
            .render("{{ gpus.count }}", &context! { gpus => 8 })
            .unwrap_err();
        assert!(matches!(err, TemplateError::Invalid { .. }), "{err:?}");
    }

    #[test]
    fn lists_variables() {
        let r = Renderer::new();
        let vars = r
            .variables("--tp {{ tp }} {% if ep %}--ep {{ ep }}{% endif %}")
            .unwrap();
        assert_eq!(vars.into_iter().collect::<Vec<_>>(), ["ep", "tp"]);
    }
}
