//! The one engine builder shared by the runner, the REPL and the rehearsal: sandbox limits,
//! strict variables, confined imports, output hooks, cancellation and every native.

use rhai::{
    Dynamic, Engine, EvalAltResult, Module, ModuleResolver, NativeCallContext, Position, Scope,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::NativeError;
use crate::output::Level;
use crate::state::RunState;

/// Default sandbox limits. `BPRUN_MAX_OPERATIONS` overrides the operation budget.
pub const MAX_OPERATIONS: u64 = 50_000_000;
pub const MAX_CALL_LEVELS: usize = 64;
pub const MAX_STRING_SIZE: usize = 16 * 1024 * 1024;
pub const MAX_ARRAY_SIZE: usize = 100_000;
pub const MAX_MAP_SIZE: usize = 100_000;
pub const MAX_MODULES: usize = 64;

pub use crate::decl::StepDecl;

/// What runs when the script's top level has finished (the runner runs the steps).
pub type RunHook = Box<dyn FnMut(&NativeCallContext, &Session) + Send>;

/// Everything one run (or one REPL session) shares: plain state plus the script-side parts.
pub struct Session {
    pub state: RunState,
    pub steps: Mutex<Vec<StepDecl>>,
    /// What the script hands the operator when a whole run succeeds (`handover`).
    pub handover: Mutex<Option<rhai::FnPtr>>,
    /// Source text of every file compiled in this session, by its display name, for diagnostics.
    pub sources: Mutex<HashMap<String, Arc<str>>>,
    /// Folder that `import` may read from (the script's folder).
    pub import_root: PathBuf,
    /// The OpenBao client, created by the first OpenBao native and shared for the session.
    pub bao: std::sync::OnceLock<bprun_clients::bao::BaoClient>,
    /// The GitLab client, created by the first GitLab native (creation can fail: no GITLAB_URL).
    pub gitlab: Mutex<Option<Arc<bprun_clients::gitlab::GitlabClient>>>,
    /// The Kubernetes client, created by the first Kubernetes native.
    pub kube: Mutex<Option<Arc<bprun_clients::kube::KubeClient>>>,
    /// The kubeconfig context to use (`--kube-context`), else the current one.
    pub kube_context: Mutex<Option<String>>,
    /// Set by the runner: what to do when the top level finishes.
    pub run_hook: Mutex<Option<RunHook>>,
    /// The script's declared parameters bound to its command line, when it declares any.
    pub params: Mutex<Option<crate::params::BoundParams>>,
    /// The remote URL of each working tree `git_clone_or_pull` handled in this run, by tree.
    pub tree_remotes: Mutex<HashMap<String, String>>,
    /// Projects (`group/name`) whose head commit a check-mode `git_commit_push` would move: a
    /// pipeline of their current head says nothing about the head they would have.
    pub pending_heads: Mutex<std::collections::HashSet<String>>,
    /// Check mode: projects whose CI/CD variables a planned write would change (a pipeline
    /// fingerprinted with them would not be reused).
    pub pending_variables: Mutex<std::collections::HashSet<String>>,
    /// The helm releases this run upgraded (namespace, release, chart): the recap says what
    /// their workloads run afterwards.
    pub upgraded_releases: Mutex<Vec<(String, String, String)>>,
    /// The names of the natives the engine registered (did-you-mean in diagnostics).
    function_names: std::sync::OnceLock<Vec<String>>,
    /// The natives' documentation (signatures included), read from the engine's metadata.
    function_docs: std::sync::OnceLock<Vec<crate::docs::FunctionDoc>>,
    /// The natives' module, from which the docs are read when first asked for (an error's hint,
    /// a mistake found before the run): never on a run's start-up.
    natives: std::sync::OnceLock<rhai::Shared<rhai::Module>>,
}

impl Session {
    pub fn new(state: RunState, import_root: PathBuf) -> Self {
        Session {
            state,
            steps: Mutex::new(Vec::new()),
            handover: Mutex::new(None),
            sources: Mutex::new(HashMap::new()),
            import_root,
            bao: std::sync::OnceLock::new(),
            gitlab: Mutex::new(None),
            kube: Mutex::new(None),
            kube_context: Mutex::new(None),
            run_hook: Mutex::new(None),
            params: Mutex::new(None),
            tree_remotes: Mutex::new(HashMap::new()),
            pending_heads: Mutex::new(std::collections::HashSet::new()),
            pending_variables: Mutex::new(std::collections::HashSet::new()),
            upgraded_releases: Mutex::new(Vec::new()),
            function_names: std::sync::OnceLock::new(),
            function_docs: std::sync::OnceLock::new(),
            natives: std::sync::OnceLock::new(),
        }
    }

    /// The natives' documentation, as `bprun functions` shows it (none before an engine was
    /// built for this session), read from their module's metadata on first use.
    pub fn function_docs(&self) -> &[crate::docs::FunctionDoc] {
        self.function_docs.get_or_init(|| {
            let Some(natives) = self.natives.get() else {
                return Vec::new();
            };
            let mut reader = rhai::Engine::new_raw();
            reader.register_global_module(natives.clone());
            let metadata = reader.gen_fn_metadata_to_json(false).unwrap_or_default();
            crate::docs::from_metadata(&metadata, &[RUN_STEPS_NATIVE])
        })
    }

    /// The natives' names, once an engine was built for this session.
    pub fn function_names(&self) -> &[String] {
        self.function_names.get().map_or(&[], Vec::as_slice)
    }

    pub fn add_source(&self, name: &str, text: &str) {
        lock(&self.sources).insert(name.to_string(), Arc::from(text));
    }

    pub fn source(&self, name: &str) -> Option<Arc<str>> {
        lock(&self.sources).get(name).cloned()
    }

    /// A path shown to operators: relative to the root when inside it.
    pub fn display_path(&self, path: &Path) -> String {
        bprun_clients::fs::relative_display(&self.state.root, path)
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Nesting limits of expressions at the top level and inside functions (Rhai's release defaults).
const MAX_EXPR_DEPTH: usize = 64;
const MAX_FUNCTION_EXPR_DEPTH: usize = 32;

impl crate::diagnostics::ScriptSources for Session {
    fn source(&self, name: &str) -> Option<Arc<str>> {
        Session::source(self, name)
    }

    fn function_names(&self) -> &[String] {
        Session::function_names(self)
    }

    fn signatures_of(&self, name: &str) -> Vec<String> {
        crate::docs::signatures_of(self.function_docs(), name)
    }
}

/// The session, stored in the engine's tag so every native can reach it.
#[derive(Clone)]
pub struct SessionHandle(pub Arc<Session>);

/// The session of the engine that is calling a native.
pub fn session(context: &NativeCallContext) -> Result<Arc<Session>, Box<EvalAltResult>> {
    context
        .tag()
        .and_then(|tag| {
            tag.read_lock::<SessionHandle>()
                .map(|handle| handle.0.clone())
        })
        .ok_or_else(|| {
            native_error(NativeError::new(
                "bprun natives need an engine built by bprun::engine::build",
            ))
        })
}

/// Raises a [`NativeError`] into the script; Rhai fills in the calling position.
pub fn native_error(error: impl Into<NativeError>) -> Box<EvalAltResult> {
    EvalAltResult::ErrorRuntime(Dynamic::from(error.into()), Position::NONE).into()
}

/// Builds the engine for `session`.
pub fn build(session: Arc<Session>) -> Engine {
    let mut engine = Engine::new();
    let max_operations = std::env::var("BPRUN_MAX_OPERATIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(MAX_OPERATIONS);
    engine
        .set_max_operations(max_operations)
        .set_max_call_levels(MAX_CALL_LEVELS)
        .set_max_string_size(MAX_STRING_SIZE)
        .set_max_array_size(MAX_ARRAY_SIZE)
        .set_max_map_size(MAX_MAP_SIZE)
        .set_max_modules(MAX_MODULES)
        // Rhai's defaults differ between debug and release builds (16 levels inside a function
        // in debug): one explicit limit, so a script that runs in one build runs in the other.
        .set_max_expr_depths(MAX_EXPR_DEPTH, MAX_FUNCTION_EXPR_DEPTH)
        .set_strict_variables(true);
    // Scripts are code reviewed in the repository; eval would let data become code.
    engine.disable_symbol("eval");

    engine.set_module_resolver(ConfinedResolver {
        session: session.clone(),
        cache: Mutex::new(HashMap::new()),
    });

    let printer = session.clone();
    engine.on_print(move |text| printer.state.reporter.log(Level::Info, text));
    let debugger = session.clone();
    engine.on_debug(move |text, _source, _position| {
        // `debug("x")` passes the debug form `"x"`; show strings without their quotes.
        let text = text
            .strip_prefix('"')
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or(text);
        debugger.state.reporter.log(Level::Debug, text)
    });
    let watcher = session.clone();
    engine.on_progress(move |_| {
        if watcher.state.is_cancelled() {
            Some(Dynamic::from("interrupted"))
        } else {
            None
        }
    });

    let natives = crate::natives::native_module();
    let mut names: Vec<String> = natives
        .gen_fn_signatures_with_mapper(|name| name.into())
        .filter_map(|signature| signature.split('(').next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    let _ = session.function_names.set(names);
    let natives: rhai::Shared<rhai::Module> = natives.into();
    let _ = session.natives.set(natives.clone());
    engine.register_global_module(natives);
    register_run_steps(&mut engine);
    engine.set_default_tag(Dynamic::from(SessionHandle(session)));
    engine
}

/// A native's call context, kept so another thread can call script closures with it
/// (`parallel`). Rhai marks this API volatile (see reference/rhai-notes.md): these two
/// functions are the only place bprun uses it.
#[allow(deprecated)]
pub fn detach_context(context: &NativeCallContext) -> rhai::NativeCallContextStore {
    context.store_data()
}

/// The call context [`detach_context`] kept, for `engine` on this thread.
#[allow(deprecated)]
pub fn attach_context<'a>(
    store: &'a rhai::NativeCallContextStore,
    engine: &'a Engine,
) -> NativeCallContext<'a> {
    store.create_context(engine)
}

/// The native the runner appends to every script; it runs the declared steps.
pub const RUN_STEPS_NATIVE: &str = "bprun_run_declared_steps";

/// Registers [`RUN_STEPS_NATIVE`]; part of every engine so the REPL can share the builder.
pub fn register_run_steps(engine: &mut Engine) {
    engine.register_fn(
        RUN_STEPS_NATIVE,
        |context: NativeCallContext| -> Result<(), Box<EvalAltResult>> {
            let session = session(&context)?;
            let hook = lock(&session.run_hook).take();
            if let Some(mut hook) = hook {
                hook(&context, &session);
            }
            Ok(())
        },
    );
}

/// `import "lib/common" as common;` resolves under the script's folder only, so a script cannot
/// pull code from elsewhere on the machine.
struct ConfinedResolver {
    session: Arc<Session>,
    cache: Mutex<HashMap<PathBuf, rhai::Shared<Module>>>,
}

impl ModuleResolver for ConfinedResolver {
    fn resolve(
        &self,
        engine: &Engine,
        _source: Option<&str>,
        path: &str,
        position: Position,
    ) -> Result<rhai::Shared<Module>, Box<EvalAltResult>> {
        let root = &self.session.import_root;
        let refuse = |message: String, hint: &str| -> Box<EvalAltResult> {
            EvalAltResult::ErrorRuntime(
                Dynamic::from(NativeError::new(message).with_hint(hint)),
                position,
            )
            .into()
        };
        let relative = Path::new(path);
        let escapes = relative.is_absolute()
            || relative
                .components()
                .any(|component| matches!(component, std::path::Component::ParentDir));
        let shown_root = self.session.display_path(root);
        if escapes {
            return Err(refuse(
                format!("import \"{path}\" is outside the script folder {shown_root}"),
                "imports resolve under the script's folder only; put shared modules in scripts/lib/",
            ));
        }
        let file = root.join(format!("{path}.rhai"));
        let real = file.canonicalize().map_err(|_| {
            refuse(
                format!(
                    "module \"{path}\" not found: no file {}",
                    self.session.display_path(&file)
                ),
                "imports name a file relative to the script's folder, without the .rhai extension",
            )
        })?;
        let real_root = root.canonicalize().unwrap_or_else(|_| root.clone());
        if !real.starts_with(&real_root) {
            return Err(refuse(
                format!("import \"{path}\" leads outside the script folder {shown_root}"),
                "imports resolve under the script's folder only; put shared modules in scripts/lib/",
            ));
        }
        if let Some(module) = lock(&self.cache).get(&real) {
            return Ok(module.clone());
        }
        let display = self.session.display_path(&file);
        let text = std::fs::read_to_string(&real).map_err(|error| {
            refuse(
                format!("cannot read module {display}: {error}"),
                "check the file's permissions",
            )
        })?;
        self.session.add_source(&display, &text);
        let mut ast = engine.compile(&text).map_err(|error| {
            Box::new(EvalAltResult::ErrorInModule(
                display.clone(),
                Box::new(error.into()),
                position,
            ))
        })?;
        ast.set_source(display.as_str());
        let module = Module::eval_ast_as_new(Scope::new(), &ast, engine).map_err(|error| {
            Box::new(EvalAltResult::ErrorInModule(
                display.clone(),
                error,
                position,
            ))
        })?;
        let module: rhai::Shared<Module> = module.into();
        lock(&self.cache).insert(real, module.clone());
        Ok(module)
    }
}
