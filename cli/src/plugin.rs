//! Plugin actors: shared libraries loaded with `monarch worker --plugin PATH`.
//!
//! The interface is the C header `bindings/cpp/include/monarch/plugin.h`
//! (mirrored by the `#[repr(C)]` types below): the library exports
//! `monarch_plugin_init`, which registers actor types as tables of C
//! function pointers (create / handle / destroy). The worker calls an
//! actor's functions from that actor's own thread (see
//! [`crate::actor_threads`]), one event at a time, never from runtime
//! threads.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Arc;

use libloading::Library;

/// `MONARCH_PLUGIN_ABI_VERSION` of plugin.h.
pub const PLUGIN_ABI_VERSION: u32 = 1;
/// `MONARCH_PLUGIN_INIT_SYMBOL` of plugin.h.
const INIT_SYMBOL: &[u8] = b"monarch_plugin_init\0";

#[repr(C)]
struct PluginBytes {
    ptr: *const u8,
    len: usize,
}

#[repr(C)]
struct PluginCall {
    method: *const c_char,
    actor: *const c_char,
    parts: *const PluginBytes,
    nparts: usize,
    rank: u64,
    shape: *const u8,
    shape_len: usize,
    reply_ctx: *mut c_void,
    add_part: unsafe extern "C" fn(*mut c_void, *const u8, usize),
    set_error: unsafe extern "C" fn(*mut c_void, *const c_char),
}

type CreateFn = unsafe extern "C" fn(*mut c_void, *const PluginCall) -> *mut c_void;
type HandleFn = unsafe extern "C" fn(*mut c_void, *const PluginCall);
type DestroyFn = unsafe extern "C" fn(*mut c_void);

#[repr(C)]
struct PluginActorType {
    name: *const c_char,
    type_data: *mut c_void,
    create: Option<CreateFn>,
    handle: Option<HandleFn>,
    destroy: Option<DestroyFn>,
}

#[repr(C)]
struct PluginRegistry {
    abi_version: u32,
    ctx: *mut c_void,
    register_type: unsafe extern "C" fn(*mut c_void, *const PluginActorType) -> c_int,
    set_error: unsafe extern "C" fn(*mut c_void, *const c_char),
}

type InitFn = unsafe extern "C" fn(*const PluginRegistry) -> c_int;

/// A registered plugin actor type.
pub struct PluginType {
    type_data: *mut c_void,
    create: CreateFn,
    handle: HandleFn,
    destroy: DestroyFn,
}

// SAFETY: a type is plain data and function pointers registered once;
// plugin.h tells plugins that actors of one type run on several threads.
unsafe impl Send for PluginType {}
// SAFETY: as for Send; the host never mutates a registered type.
unsafe impl Sync for PluginType {}

/// An instance of a plugin actor; destroyed when dropped.
pub struct PluginActor {
    ty: Arc<PluginType>,
    instance: *mut c_void,
}

// SAFETY: an instance is used by one thread at a time (its actor's thread
// creates, calls and destroys it).
unsafe impl Send for PluginActor {}

impl Drop for PluginActor {
    fn drop(&mut self) {
        // SAFETY: `instance` came from this type's `create` and is destroyed
        // once; the library is still loaded (Plugins outlives the actors).
        unsafe { (self.ty.destroy)(self.instance) }
    }
}

/// The loaded plugin libraries and the actor types they registered.
/// Must outlive every `PluginActor` made from it.
#[derive(Default)]
pub struct Plugins {
    types: HashMap<String, Arc<PluginType>>,
    // Kept loaded until the worker exits (after every actor is dropped).
    libs: Vec<Library>,
}

/// Registration state handed to `monarch_plugin_init` as `ctx`.
struct InitCtx {
    types: Vec<(String, PluginType)>,
    error: Option<String>,
}

unsafe extern "C" fn register_type(ctx: *mut c_void, t: *const PluginActorType) -> c_int {
    // SAFETY: ctx is the &mut InitCtx passed to init, for the call's duration.
    let ctx = unsafe { &mut *(ctx as *mut InitCtx) };
    if t.is_null() {
        ctx.error = Some("register_type: NULL type".into());
        return 1;
    }
    // SAFETY: the plugin passes a valid struct, borrowed for this call.
    let t = unsafe { &*t };
    if t.name.is_null() {
        ctx.error = Some("register_type: type without a name".into());
        return 1;
    }
    // SAFETY: NUL-terminated per plugin.h.
    let name = match unsafe { CStr::from_ptr(t.name) }.to_str() {
        Ok(n) if !n.is_empty() => n.to_string(),
        _ => {
            ctx.error = Some("register_type: name is empty or not UTF-8".into());
            return 1;
        }
    };
    let (Some(create), Some(handle), Some(destroy)) = (t.create, t.handle, t.destroy) else {
        ctx.error = Some(format!(
            "register_type: type '{name}' lacks create, handle or destroy"
        ));
        return 1;
    };
    if ctx.types.iter().any(|(n, _)| *n == name) {
        ctx.error = Some(format!("register_type: type '{name}' registered twice"));
        return 1;
    }
    ctx.types.push((
        name,
        PluginType {
            type_data: t.type_data,
            create,
            handle,
            destroy,
        },
    ));
    0
}

unsafe extern "C" fn init_set_error(ctx: *mut c_void, msg: *const c_char) {
    // SAFETY: as in register_type.
    let ctx = unsafe { &mut *(ctx as *mut InitCtx) };
    ctx.error = Some(lossy(msg));
}

fn lossy(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: NUL-terminated per plugin.h.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// Where an actor's answer is collected.
#[derive(Default)]
struct ReplyBuf {
    parts: Vec<Vec<u8>>,
    error: Option<String>,
}

unsafe extern "C" fn add_part(ctx: *mut c_void, ptr: *const u8, len: usize) {
    // SAFETY: ctx is the &mut ReplyBuf of the running call.
    let buf = unsafe { &mut *(ctx as *mut ReplyBuf) };
    let bytes = if len == 0 || ptr.is_null() {
        Vec::new()
    } else {
        // SAFETY: the plugin passes `len` readable bytes at `ptr`.
        unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec()
    };
    buf.parts.push(bytes);
}

unsafe extern "C" fn reply_set_error(ctx: *mut c_void, msg: *const c_char) {
    // SAFETY: ctx is the &mut ReplyBuf of the running call.
    let buf = unsafe { &mut *(ctx as *mut ReplyBuf) };
    if buf.error.is_none() {
        buf.error = Some(lossy(msg));
    }
}

/// Invoke `f` with a `PluginCall` describing the event; return the answer.
fn with_call(
    method: &str,
    actor: &str,
    parts: &[Vec<u8>],
    rank: u64,
    shape: Option<&[u8]>,
    f: impl FnOnce(&PluginCall),
) -> Result<Vec<Vec<u8>>, String> {
    let c_method = CString::new(method).map_err(|_| "method name contains NUL".to_string())?;
    let c_actor = CString::new(actor).map_err(|_| "actor key contains NUL".to_string())?;
    let c_parts: Vec<PluginBytes> = parts
        .iter()
        .map(|p| PluginBytes {
            ptr: p.as_ptr(),
            len: p.len(),
        })
        .collect();
    let mut buf = ReplyBuf::default();
    let call = PluginCall {
        method: c_method.as_ptr(),
        actor: c_actor.as_ptr(),
        parts: c_parts.as_ptr(),
        nparts: c_parts.len(),
        rank,
        shape: shape.map_or(std::ptr::null(), <[u8]>::as_ptr),
        shape_len: shape.map_or(0, <[u8]>::len),
        reply_ctx: &mut buf as *mut ReplyBuf as *mut c_void,
        add_part,
        set_error: reply_set_error,
    };
    f(&call);
    match buf.error {
        Some(e) => Err(e),
        None => Ok(buf.parts),
    }
}

impl Plugins {
    /// Load the library at `path` and register its actor types.
    pub fn load(&mut self, path: &str) -> Result<(), String> {
        // SAFETY: loading a library runs its initializers; the user asked
        // for this library to be loaded into the worker.
        let lib = unsafe { Library::new(path) }
            .map_err(|e| format!("cannot load plugin '{path}': {e}"))?;
        // SAFETY: the symbol has the signature documented in plugin.h.
        let init: InitFn = unsafe {
            *lib.get::<InitFn>(INIT_SYMBOL)
                .map_err(|e| format!("plugin '{path}' does not export monarch_plugin_init: {e}"))?
        };
        let mut ctx = InitCtx {
            types: Vec::new(),
            error: None,
        };
        let reg = PluginRegistry {
            abi_version: PLUGIN_ABI_VERSION,
            ctx: &mut ctx as *mut InitCtx as *mut c_void,
            register_type,
            set_error: init_set_error,
        };
        // SAFETY: `reg` and `ctx` live for the call.
        let rc = unsafe { init(&reg) };
        if rc != 0 {
            return Err(format!(
                "plugin '{path}': monarch_plugin_init failed ({rc}): {}",
                ctx.error.unwrap_or_else(|| "no reason given".into())
            ));
        }
        for (name, t) in ctx.types {
            if self.types.contains_key(&name) {
                return Err(format!(
                    "plugin '{path}': actor type '{name}' is already registered"
                ));
            }
            tracing::debug!(plugin = path, actor_type = %name, "registered plugin actor type");
            self.types.insert(name, Arc::new(t));
        }
        self.libs.push(lib);
        Ok(())
    }

    /// The registered type names, sorted.
    pub fn type_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.types.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    pub fn has_type(&self, name: &str) -> bool {
        self.types.contains_key(name)
    }

    /// The registered type `name`, if any.
    pub fn actor_type(&self, name: &str) -> Option<Arc<PluginType>> {
        self.types.get(name).cloned()
    }
}

impl PluginType {
    /// Construct an actor of this type (`type_name` names it in errors).
    pub fn create(
        self: &Arc<Self>,
        type_name: &str,
        actor: &str,
        args: &[Vec<u8>],
        rank: u64,
        shape: Option<&[u8]>,
    ) -> Result<PluginActor, String> {
        let ty = self.clone();
        let mut instance = std::ptr::null_mut();
        let r = with_call("", actor, args, rank, shape, |call| {
            // SAFETY: the function pointers come from the plugin's init and
            // the call struct is valid for the call.
            instance = unsafe { (ty.create)(ty.type_data, call) };
        });
        match r {
            Err(e) => {
                if !instance.is_null() {
                    // SAFETY: created by this type, destroyed once.
                    unsafe { (ty.destroy)(instance) };
                }
                Err(e)
            }
            Ok(_) if instance.is_null() => Err(format!(
                "constructor of plugin actor type '{type_name}' returned NULL"
            )),
            Ok(_) => Ok(PluginActor { ty, instance }),
        }
    }
}

impl PluginActor {
    /// Run endpoint `method`.
    pub fn handle(
        &mut self,
        method: &str,
        actor: &str,
        parts: &[Vec<u8>],
        rank: u64,
        shape: Option<&[u8]>,
    ) -> Result<Vec<Vec<u8>>, String> {
        let (handle, instance) = (self.ty.handle, self.instance);
        with_call(method, actor, parts, rank, shape, |call| {
            // SAFETY: as in create; `instance` is alive.
            unsafe { handle(instance, call) }
        })
    }
}
