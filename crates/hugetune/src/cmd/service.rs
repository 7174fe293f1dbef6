//! `hugetune service install|remove UNIT`: deploys a plan to a systemd service
//! and takes it away again. Owns reading the unit (its file and drop-ins: the
//! ExecStart program, Environment=), the text of the files it writes — a drop-in
//! that preloads the runtime library with the plan, the plan file, a oneshot unit
//! that reserves the plan's hugetlb pages at boot — and the marker that tells its
//! files from anybody else's. The plan comes from the database as for `hugetune
//! run` (stages), or from `--plan FILE`, checked by the runtime library's own parser.

use crate::{stages, Ctx};
use anyhow::{anyhow, bail, Context, Result};
use hugetune_format::env;
use hugetune_format::plan::{plan_text_with, PlanOptions};
use hugetune_format::summary::Summary;
use hugetune_host::machine;
use hugetune_model::category::Category;
use hugetune_model::page::Backing;
use hugetune_model::plan::Availability;
use hugetune_model::sizing::Pool;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Preload the runtime library with the plan for a service's program: a
    /// drop-in, the plan file, and a oneshot unit that reserves its hugetlb pages at boot
    Install(InstallArgs),
    /// Remove exactly the files `service install` wrote for a service
    Remove(Target),
}

#[derive(clap::Args)]
struct Target {
    /// The systemd service: NAME or NAME.service (an instance of a template: NAME@INSTANCE)
    unit: String,
    /// Print every file with its content and every command, and change nothing
    #[arg(long)]
    dry_run: bool,
    /// Root of the system to change (an image, a container, a test directory): units
    /// are read and written there; the program's profile is this machine's
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
}

#[derive(clap::Args)]
struct InstallArgs {
    #[command(flatten)]
    target: Target,
    /// Deploy this plan file (checked by the runtime library's parser) instead of the
    /// plan chosen from the database for the unit's ExecStart program
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// 2 MB hugetlb pages: the most the chosen plan may take (default: what it needs,
    /// up to the memory); with --plan, the pages to reserve when the plan has no
    /// `pool hugetlb-2m N`
    #[arg(long, value_name = "N")]
    pages: Option<u64>,
    /// 1 GB hugetlb pages: likewise (default without --plan: none, since 1 GB pages
    /// are reliably had only from the kernel command line)
    #[arg(long, value_name = "N")]
    pages_1g: Option<u64>,
    /// Smallest predicted gain worth huge pages, as a fraction of the run time
    #[arg(long, default_value_t = stages::DEFAULT_MIN_GAIN)]
    min_gain: f64,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    match a.action {
        Action::Install(i) => install(ctx, i),
        Action::Remove(t) => remove(t),
    }
}

/// The first line of every file hugetune writes for a unit; remove and a new
/// install touch a file only when it starts with this.
fn marker(unit: &Unit) -> String {
    format!(
        "# Written by hugetune service install for {0}: `hugetune service remove {0}` removes it.",
        unit.name
    )
}
const MARKER_PREFIX: &str = "# Written by hugetune service install";
const FROM_PREFIX: &str = "# From: ";

/// Where a library that cannot be named from a unit (a per-user cache, a build
/// tree under a home) is copied for services.
const LIB_COPY: &str = "/usr/local/lib/hugetune/libhugetune.so";

/// systemd's unit search path (systemd.unit(5)), most important first.
const UNIT_DIRS: [&str; 5] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
];

/// Unit types that are not services (systemd.unit(5)).
const OTHER_TYPES: [&str; 10] = [
    "socket",
    "timer",
    "target",
    "mount",
    "automount",
    "swap",
    "path",
    "slice",
    "scope",
    "device",
];

/// A service's name as systemd spells it.
#[derive(Debug, Clone)]
struct Unit {
    /// `NAME.service`
    name: String,
    /// `NAME`
    stem: String,
    /// For an instance `PREFIX@INSTANCE`: both parts.
    instance: Option<(String, String)>,
}

impl Unit {
    fn parse(s: &str) -> Result<Unit> {
        if s.is_empty() {
            bail!("empty unit name");
        }
        if s.contains('/') || s.contains("..") {
            bail!("'{s}' is not a unit name ('/' and '..' are refused: a name, not a path)");
        }
        if let Some(c) = s
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || ":_.@-".contains(c)))
        {
            bail!(
                "'{}': '{}' cannot be in a unit name (letters, digits and : _ . @ - only)",
                s.escape_default(),
                c.escape_default()
            );
        }
        if s.starts_with(['-', '.', '@']) {
            bail!("'{s}': a unit name does not start with '-', '.' or '@'");
        }
        let stem = s.strip_suffix(".service").unwrap_or(s);
        if let Some((_, ext)) = stem.rsplit_once('.') {
            if OTHER_TYPES.contains(&ext) {
                bail!("'{s}' is a {ext} unit: hugetune deploys to services only");
            }
        }
        let name = format!("{stem}.service");
        if stem.is_empty() || name.len() > 255 {
            bail!("'{s}': a unit name has 1 to 255 characters");
        }
        let instance = match stem.split_once('@') {
            None => None,
            Some((p, i)) => {
                if i.contains('@') {
                    bail!("'{s}': one '@' at most (NAME@INSTANCE)");
                }
                if i.is_empty() {
                    bail!("'{s}' is a template: name one of its instances, e.g. {p}@1.service");
                }
                Some((p.to_string(), i.to_string()))
            }
        };
        Ok(Unit {
            name,
            stem: stem.to_string(),
            instance,
        })
    }

    fn template(&self) -> Option<String> {
        self.instance.as_ref().map(|(p, _)| format!("{p}@.service"))
    }

    /// The pool unit's name without `.service`: an `@` would make it an
    /// instance of a template. Its marker says whose it is, so a clash between
    /// `a@b` and `a_b` is refused, not overwritten.
    fn pool_stem(&self) -> String {
        format!("hugetune-pool-{}", self.stem.replace('@', "_"))
    }

    /// The service's RuntimeDirectory= for the library's summaries (/run/NAME,
    /// owned by the service's user, removed when it stops).
    fn summary_dir(&self) -> String {
        format!("hugetune-{}", self.stem.replace('@', "_"))
    }
}

/// The files of one unit's deployment, as paths on the target system.
struct Paths {
    dropin: PathBuf,
    plan: PathBuf,
    pool: PathBuf,
    pool_name: String,
    /// `systemctl enable`'s link for the pool unit (WantedBy=sysinit.target).
    pool_link: PathBuf,
}

impl Paths {
    fn of(unit: &Unit) -> Paths {
        let sys = Path::new("/etc/systemd/system");
        let pool_name = format!("{}.service", unit.pool_stem());
        Paths {
            dropin: sys.join(format!("{}.d", unit.name)).join("hugetune.conf"),
            plan: Path::new("/etc/hugetune").join(format!("{}.plan", unit.name)),
            pool: sys.join(&pool_name),
            pool_link: sys.join("sysinit.target.wants").join(&pool_name),
            pool_name,
        }
    }
}

/// The root of the system changed (`--root`): target paths are absolute there.
struct Root(PathBuf);

impl Root {
    fn new(p: &Path) -> Result<Root> {
        let c = std::fs::canonicalize(p)
            .with_context(|| format!("--root {}: no such directory", p.display()))?;
        anyhow::ensure!(c.is_dir(), "--root {}: not a directory", p.display());
        Ok(Root(c))
    }

    fn is_system(&self) -> bool {
        self.0 == Path::new("/")
    }

    /// `abs` (a path on the target system) on this machine.
    fn at(&self, abs: &Path) -> PathBuf {
        self.0.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    fn show(&self, abs: &Path) -> String {
        self.at(abs).display().to_string()
    }
}

/// `..` and `.` resolved by name (a link's target inside the root may not
/// climb out of it).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The file a unit path names, its links followed inside the root; None when
/// it is masked (a link to /dev/null, or empty).
fn resolve(root: &Root, abs: &Path) -> Result<Option<PathBuf>> {
    let mut p = normalize(abs);
    for _ in 0..16 {
        if p == Path::new("/dev/null") {
            return Ok(None);
        }
        let at = root.at(&p);
        let md =
            std::fs::symlink_metadata(&at).with_context(|| format!("reading {}", at.display()))?;
        if !md.file_type().is_symlink() {
            let md = std::fs::metadata(&at).with_context(|| format!("reading {}", at.display()))?;
            return Ok((md.len() > 0).then_some(at));
        }
        let t = std::fs::read_link(&at)
            .with_context(|| format!("reading the link {}", at.display()))?;
        p = normalize(&if t.is_absolute() {
            t
        } else {
            p.parent().unwrap_or(Path::new("/")).join(t)
        });
    }
    bail!("{}: too many levels of symbolic links", root.show(abs))
}

/// What hugetune needs from a unit's [Service] section, after all its files.
#[derive(Debug, Default)]
struct Service {
    exec_start: Vec<String>,
    environment: Vec<(String, String)>,
    environment_file: bool,
}

impl Service {
    fn env(&self, k: &str) -> Option<&str> {
        self.environment
            .iter()
            .rev()
            .find(|(kk, _)| kk == k)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.trim().is_empty())
    }

    /// Applies one unit file (systemd.syntax(7)): later settings add to or, when
    /// empty, reset the earlier ones, as systemd merges drop-ins.
    fn read(&mut self, text: &str) {
        let mut section = String::new();
        let mut pending = String::new();
        for raw in text.lines() {
            // A backslash at the end of a line continues it on the next.
            if let Some(head) = raw.strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            let line = std::mem::take(&mut pending) + raw;
            let t = line.trim();
            if t.is_empty() || t.starts_with(['#', ';']) {
                continue;
            }
            if let Some(s) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                section = s.to_string();
                continue;
            }
            let Some((k, v)) = t.split_once('=') else {
                continue;
            };
            if section != "Service" {
                continue;
            }
            let v = v.trim();
            match k.trim() {
                "ExecStart" if v.is_empty() => self.exec_start.clear(),
                "ExecStart" => self.exec_start.push(v.to_string()),
                "Environment" if v.is_empty() => self.environment.clear(),
                "Environment" => {
                    // systemd ignores a malformed assignment list; so does this.
                    for w in stages::split_command(v).unwrap_or_default() {
                        if let Some((a, b)) = w.to_string_lossy().split_once('=') {
                            self.environment.push((a.to_string(), b.to_string()));
                        }
                    }
                }
                "EnvironmentFile" => self.environment_file = !v.is_empty(),
                _ => {}
            }
        }
    }
}

/// Reads the unit's file and drop-ins (skipping hugetune's own, which an install
/// replaces), in systemd's order.
fn read_unit(root: &Root, unit: &Unit, own_dropin: &Path) -> Result<Service> {
    let mut names = vec![unit.name.clone()];
    names.extend(unit.template());
    let mut main = None;
    'find: for n in &names {
        for d in UNIT_DIRS {
            let abs = Path::new(d).join(n);
            if std::fs::symlink_metadata(root.at(&abs)).is_ok() {
                match resolve(root, &abs)? {
                    None => bail!(
                        "{} is masked ({} is empty or links to /dev/null): unmask it first",
                        unit.name,
                        root.show(&abs)
                    ),
                    Some(f) => {
                        main = Some(f);
                        break 'find;
                    }
                }
            }
        }
    }
    let Some(main) = main else {
        bail!(
            "no unit {} in {} (looked in {} and for a template)",
            unit.name,
            root.0.display(),
            UNIT_DIRS.join(", ")
        );
    };
    let mut svc = Service::default();
    svc.read(
        &std::fs::read_to_string(&main).with_context(|| format!("reading {}", main.display()))?,
    );
    // Drop-ins: the template's and the instance's, a name in an earlier
    // directory hiding the same name in a later one, applied in name order.
    let mut dirs = Vec::new();
    dirs.extend(unit.template().map(|t| format!("{t}.d")));
    dirs.push(format!("{}.d", unit.name));
    let mut dropins: BTreeMap<OsString, PathBuf> = BTreeMap::new();
    for dd in &dirs {
        for d in UNIT_DIRS {
            let rel = Path::new(d).join(dd);
            let Ok(rd) = std::fs::read_dir(root.at(&rel)) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name();
                let abs = rel.join(&name);
                if name.to_string_lossy().ends_with(".conf") && abs != own_dropin {
                    dropins.entry(name).or_insert(abs);
                }
            }
        }
    }
    for abs in dropins.values() {
        if let Some(f) = resolve(root, abs)? {
            svc.read(
                &std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?,
            );
        }
    }
    Ok(svc)
}

/// systemd's specifiers that name the unit (systemd.unit(5)); others stay.
fn expand_specifiers(unit: &Unit, s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('%') => out.push('%'),
            Some('n') => out.push_str(&unit.name),
            Some('N') => out.push_str(&unit.stem),
            Some('p') => out.push_str(unit.instance.as_ref().map_or(&unit.stem, |(p, _)| p)),
            Some('i' | 'I') => out.push_str(unit.instance.as_ref().map_or("", |(_, i)| i)),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The command line of an ExecStart= value: its prefixes (`@-:+!`) dropped, and
/// with `@` the second word (argv[0] given separately) too.
fn exec_argv(unit: &Unit, value: &str) -> Result<Vec<OsString>> {
    let v = value.trim_start_matches(|c| "@-:+!".contains(c));
    let argv0_given = value[..value.len() - v.len()].contains('@');
    let mut words = stages::split_command(&expand_specifiers(unit, v))
        .with_context(|| format!("{}: ExecStart={value}", unit.name))?;
    if argv0_given && words.len() > 1 {
        words.remove(1);
    }
    let prog = words[0].to_string_lossy();
    if prog.contains(['$', '%']) {
        bail!(
            "{}: the program '{prog}' of ExecStart= names a variable or specifier hugetune cannot \
             resolve: give --plan FILE",
            unit.name
        );
    }
    Ok(words)
}

/// What the runtime library will need for a plan, from its (valid) text.
#[derive(Debug, Default, PartialEq)]
struct PlanNeeds {
    hugetlb_2m: bool,
    hugetlb_1g: bool,
    pool_2m: Option<u64>,
    pool_1g: Option<u64>,
    /// heap-small through glibc's tunable (`heap-small thp-2m`).
    tunable: bool,
    /// The JVM's own switch (`jvm B`): JAVA_TOOL_OPTIONS in the drop-in.
    jvm: Option<Backing>,
}

fn plan_needs(text: &str) -> PlanNeeds {
    let mut n = PlanNeeds::default();
    let mut fork_thp = false;
    for line in text.lines() {
        let w: Vec<&str> = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        match w.as_slice() {
            ["fork-safe", "thp"] => fork_thp = true,
            ["pool", "hugetlb-2m", k] => n.pool_2m = k.parse().ok(),
            ["pool", "hugetlb-1g", k] => n.pool_1g = k.parse().ok(),
            ["heap-small", "thp-2m"] => n.tunable = true,
            ["jvm", b] => n.jvm = b.parse().ok(),
            _ => {}
        }
        n.hugetlb_2m |= w.contains(&"hugetlb-2m");
        n.hugetlb_1g |= w.contains(&"hugetlb-1g");
    }
    // fork-safe thp: no private hugetlb memory at all, THP instead.
    if fork_thp {
        n = PlanNeeds {
            tunable: n.tunable,
            // The JVM's switch is the JVM's: the library's fork handling
            // does not reach it (THP is fork-safe; hugetlb is the JVM's pool).
            jvm: n.jvm,
            hugetlb_2m: n.jvm == Some(Backing::Hugetlb2m),
            ..PlanNeeds::default()
        };
    }
    n
}

/// The plan body without the header an earlier install put on it.
fn strip_header(text: &str) -> &str {
    let mut rest = text;
    if rest.starts_with(MARKER_PREFIX) {
        rest = rest.split_once('\n').map_or("", |(_, r)| r);
        if rest.starts_with(FROM_PREFIX) {
            rest = rest.split_once('\n').map_or("", |(_, r)| r);
        }
    }
    rest
}

/// One line of a comment: control characters (a newline in an argument) would end it.
fn comment_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Runs `true` under the runtime library in apply mode with `plan`: the
/// library's own parser decides, and its summary says why it refuses. Every
/// hugetlb mapping of the library fails on purpose, so that a `pool` directive
/// takes no pages for the check.
fn check_plan(lib: &Path, plan: &Path) -> Result<()> {
    let t = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .context("cannot check the plan: no /bin/true to run the runtime library in")?;
    let plan_abs = std::path::absolute(plan)?;
    let dir = hugetune_host::kernel_state::Scratch::new("hugetune-check.")?;
    let mut c = Command::new(t);
    c.env_clear()
        .envs(env::apply_env(
            lib,
            &plan_abs,
            Some(&dir.path().join("summary.%p.json")),
            &[],
        ))
        .env("LD_PRELOAD", lib)
        .env("HUGETUNE_INJECT", "hugetlb:1")
        .env("HUGETUNE_QUIET", "1");
    c.status()
        .with_context(|| format!("running {} to check the plan", t.display()))?;
    let summaries = stages::take_summaries(dir.path());
    let s = summaries
        .first()
        .map(Summary::from_value)
        .transpose()
        .context("the runtime library's summary is not readable by this hugetune")?
        .ok_or_else(|| {
            anyhow!(
                "cannot check the plan {}: the runtime library {} wrote no summary for {}",
                plan.display(),
                lib.display(),
                t.display()
            )
        })?;
    if s.plan.valid != Some(true) {
        bail!(
            "{}: the runtime library refuses this plan: {}",
            plan.display(),
            if s.errors.is_empty() {
                "it does not say why".to_string()
            } else {
                s.errors.join("; ")
            }
        );
    }
    Ok(())
}

/// The plan to deploy: its text (without header), where it comes from, the pages.
struct Chosen {
    body: String,
    about: String,
    needs: PlanNeeds,
    pages_2m: u64,
    pages_1g: u64,
}

fn plan_from_file(lib: &Path, f: &Path, a: &InstallArgs) -> Result<Chosen> {
    let raw = std::fs::read(f).with_context(|| format!("reading the plan {}", f.display()))?;
    check_plan(lib, f)?;
    let text = String::from_utf8(raw)
        .map_err(|_| anyhow!("{}: the plan is not UTF-8 text", f.display()))?;
    let body = strip_header(&text).to_string();
    let needs = plan_needs(&body);
    let pages = |uses: bool, pool: Option<u64>, given: Option<u64>, size: Pool, opt: &str| {
        if !uses {
            return Ok(0);
        }
        let label = pool_label(size);
        if let (Some(p), Some(g)) = (pool, given) {
            if p != g {
                stages::note(format!(
                    "{opt} {g} ignored: the plan's pool directive asks for {p} {label} pages"
                ));
            }
        }
        pool.or(given).ok_or_else(|| {
            anyhow!(
                "{}: the plan puts data on {label} hugetlb pages but does not say how many to \
                 reserve: give {opt} N (`hugetune size` prints it) or add `pool {} N` to it",
                f.display(),
                pool_backing(size)
            )
        })
    };
    // Blocks on 1 GB pages put their tails on 2 MB pages (docs/formats.md §3):
    // reserved when asked for, not demanded.
    let pages_2m = if needs.hugetlb_1g && !needs.hugetlb_2m {
        needs.pool_2m.or(a.pages).unwrap_or(0)
    } else {
        pages(
            needs.hugetlb_2m,
            needs.pool_2m,
            a.pages,
            Pool::P2m,
            "--pages",
        )?
    };
    let pages_1g = pages(
        needs.hugetlb_1g,
        needs.pool_1g,
        a.pages_1g,
        Pool::P1g,
        "--pages-1g",
    )?;
    Ok(Chosen {
        body,
        about: format!("the plan file {}", f.display()),
        needs,
        pages_2m,
        pages_1g,
    })
}

fn plan_from_db(ctx: &Ctx, unit: &Unit, svc: &Service, a: &InstallArgs) -> Result<Chosen> {
    let argv = match svc.exec_start.as_slice() {
        [] => bail!(
            "{} has no ExecStart=: there is no program to find a plan for",
            unit.name
        ),
        [one] => exec_argv(unit, one)?,
        more => bail!(
            "{} has {} ExecStart= commands: give --plan FILE with the plan to apply",
            unit.name,
            more.len()
        ),
    };
    let db = ctx.db()?;
    let Some(st) = stages::stored_predictions(&db, &argv)? else {
        bail!(
            "no profile of {} (the ExecStart= program of {}) in {}: run `hugetune optimize -- {}` first, or give --plan FILE",
            stages::display_cmd(&argv[..1]),
            unit.name,
            ctx.db_path.display(),
            stages::display_cmd(&argv)
        );
    };
    // The pool unit reserves what the plan needs, so the budget is the memory
    // (or --pages), not what is free now; 1 GB pages only when asked.
    let now = stages::availability_now();
    let avail = Availability {
        hugetlb_2m_free: a
            .pages
            .unwrap_or(machine::mem_total_kb().unwrap_or(0) / 2048),
        hugetlb_2m_total: 0,
        hugetlb_1g_free: a.pages_1g.unwrap_or(0),
        thp: now.thp,
        mthp: now.mthp,
        // The unit runs the program without hugetune around each run: no
        // per-size THP control can be set for it, only usable sizes count.
        thp_settable: vec![],
        thp_2m_allocatable: None,
    };
    let mut d = st.choose(&avail, a.min_gain);
    // A service's JVM gets THP through its switch: -XX:+UseLargePages would
    // commit the whole heap from a pool sized by -Xmx, which the pool unit
    // does not reserve. A switch of the service's own stays (jvm.rs).
    if d.jvm.is_some() {
        let env = |k: &str| svc.env(k).map(str::to_string);
        let own = stages::jvm::JavaOptions::of(&argv, &env).user_switch;
        if let Some(sw) = own {
            d.reasons.push(format!(
                "the service sets its own JVM switch ({sw}): left as it is"
            ));
            d.jvm = None;
        } else {
            d.jvm = Some(Backing::Thp2m);
        }
    }
    if d.prediction.is_none() && d.jvm.is_none() {
        bail!(
            "the plan for {} is to run it unchanged ({}): nothing to install",
            stages::display_cmd(&argv),
            d.reasons.last().map_or("no reason given", String::as_str)
        );
    }
    let body = plan_text_with(
        &d.assignments,
        st.threshold,
        &PlanOptions::for_decision(&st.program, &d),
    );
    let needs = plan_needs(&body);
    let predicted = match &d.prediction {
        Some(p) => format!("predicted {:.2}x", p.predicted_speedup),
        None => "the JVM's heap is not modelled: no predicted speedup".into(),
    };
    let (hugetlb_pages, hugetlb_1g_pages) = d
        .prediction
        .as_ref()
        .map_or((0, 0), |p| (p.hugetlb_pages, p.hugetlb_1g_pages));
    Ok(Chosen {
        about: format!(
            "profile #{} of {}: {} ({predicted})",
            st.profile_id,
            stages::display_cmd(&argv),
            super::decision_text(&d),
        ),
        // A block on 1 GB pages has its tail on 2 MB pages (docs/formats.md §3):
        // the prediction counts both.
        pages_2m: if needs.hugetlb_2m || needs.hugetlb_1g {
            hugetlb_pages
        } else {
            0
        },
        pages_1g: if needs.hugetlb_1g {
            hugetlb_1g_pages
        } else {
            0
        },
        needs,
        body,
    })
}

/// The runtime library as the service will load it: its path on the target
/// system, and the file to copy there first when the one hugetune uses cannot
/// be named from a unit (under a home or the temporary directory: another user,
/// ProtectHome= or PrivateTmp= would not see it) or is not on the target system.
fn service_library(root: &Root, lib: &Path) -> Result<(PathBuf, Option<PathBuf>)> {
    let lib = std::fs::canonicalize(lib)
        .with_context(|| format!("the runtime library {}", lib.display()))?;
    let private = [
        dirs::home_dir(),
        dirs::cache_dir(),
        Some(std::env::temp_dir()),
    ]
    .into_iter()
    .flatten()
    .filter_map(|d| std::fs::canonicalize(d).ok())
    .filter(|d| d != Path::new("/"))
    .any(|d| lib.starts_with(d));
    // LD_PRELOAD splits on spaces and colons.
    let nameable = !lib
        .to_string_lossy()
        .contains(|c: char| c.is_whitespace() || c == ':');
    if !private && nameable && root.at(&lib).is_file() {
        return Ok((lib, None));
    }
    Ok((PathBuf::from(LIB_COPY), Some(lib)))
}

/// The drop-in's environment: the runtime library's apply mode (format::env),
/// merged with what the unit itself preloads and tunes, not with this shell's.
fn service_env(
    lib: &Path,
    plan: &Path,
    needs: &PlanNeeds,
    svc: &Service,
    summary_dir: &str,
) -> Result<Vec<(String, String)>> {
    // Only the tunable form of heap-small needs an assignment to set GLIBC_TUNABLES.
    let (assignments, opts) = if needs.tunable {
        (
            vec![(Category::HeapSmall, Backing::Thp2m)],
            PlanOptions {
                heap_small_arena: false,
                ..PlanOptions::default()
            },
        )
    } else {
        (vec![], PlanOptions::default())
    };
    // Summaries in the service's runtime directory, and a request file there:
    // `hugetune status -p PID` asks a running process what it applied where.
    let run = Path::new("/run").join(summary_dir);
    let mut e = env::apply_env_with(
        lib,
        plan,
        Some(&run.join("summary.%p.json")),
        &assignments,
        &opts,
    );
    e.push((
        "HUGETUNE_SUMMARY_REQUEST".into(),
        run.join("request").display().to_string(),
    ));
    // The JVM's switch after the service's own JAVA_TOOL_OPTIONS (a drop-in's
    // Environment= replaces the unit's value for the same variable).
    if let Some(b) = needs.jvm {
        let opts = PlanOptions::default().with_jvm(Some(b));
        let mut jv: Vec<(String, String)> = svc
            .env("JAVA_TOOL_OPTIONS")
            .map(|v| vec![("JAVA_TOOL_OPTIONS".to_string(), v.to_string())])
            .unwrap_or_else(|| vec![("JAVA_TOOL_OPTIONS".to_string(), String::new())]);
        stages::jvm::environment(&opts, &[], None, &mut jv);
        e.extend(jv);
    }
    for (k, v) in e.iter_mut() {
        match k.as_str() {
            "LD_PRELOAD" => {
                *v = match svc.env("LD_PRELOAD") {
                    Some(u) => format!("{} {u}", lib.display()),
                    None => lib.display().to_string(),
                }
            }
            "GLIBC_TUNABLES" => {
                let ours = v.rsplit(':').next().unwrap_or_default().to_string();
                *v = match svc.env("GLIBC_TUNABLES") {
                    Some(u) => format!("{u}:{ours}"),
                    None => ours,
                }
            }
            _ => {}
        }
        if v.chars().any(char::is_control) {
            bail!("{k}={v}: a control character cannot go into a unit file");
        }
    }
    Ok(e)
}

/// One assignment of Environment=, quoted for systemd (systemd.syntax(7)):
/// `%` is a specifier there, `"` and `\` are escaped inside quotes.
fn env_assignment(k: &str, v: &str) -> String {
    let kv = format!("{k}={v}")
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%");
    format!("\"{kv}\"")
}

fn header(unit: &Unit, about: &str) -> String {
    format!("{}\n{FROM_PREFIX}{}\n", marker(unit), comment_line(about))
}

fn dropin_text(unit: &Unit, about: &str, env: &[(String, String)], pool: Option<&str>) -> String {
    let mut s = header(unit, about);
    s.push_str(
        "# The runtime library applies the plan to the service's processes; \
         `hugetune status -p PID` shows what is huge.\n",
    );
    if let Some(p) = pool {
        s.push_str(&format!(
            "[Unit]\n# Wants=, not Requires=: short of pages the library falls back (THP, then 4 KB pages),\n\
             # and the service must start anyway.\nWants={p}\nAfter={p}\n\n"
        ));
    }
    s.push_str("[Service]\n");
    s.push_str(&format!(
        "# Where the library writes its summaries (hugetune status asks for one there).\n\
         RuntimeDirectory={}\n",
        unit.summary_dir()
    ));
    for (k, v) in env {
        s.push_str(&format!("Environment={}\n", env_assignment(k, v)));
    }
    s
}

fn pool_label(pool: Pool) -> &'static str {
    match pool {
        Pool::P2m => "2 MB",
        Pool::P1g => "1 GB",
    }
}

fn pool_backing(pool: Pool) -> &'static str {
    match pool {
        Pool::P2m => "hugetlb-2m",
        Pool::P1g => "hugetlb-1g",
    }
}

fn nr_hugepages(pool: Pool) -> String {
    format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
        pool.page_kb()
    )
}

/// Adds `pages` to the pool (never sets it: others' reservations stay) and
/// notes in the runtime directory how many the kernel really added, for
/// `give_back_script`. Never fails: the service starts either way.
fn reserve_script(unit: &Unit, pool: Pool, pages: u64) -> String {
    let (kb, label, f) = (pool.page_kb(), pool_label(pool), nr_hugepages(pool));
    let mut s = String::new();
    if pool == Pool::P1g {
        // A kernel command line that reserves 1 GB pages (what install prints)
        // takes the place of this late reservation.
        s.push_str(
            "case \" $(cat /proc/cmdline) \" in *\" hugepagesz=1G \"*|*\" default_hugepagesz=1G \"*) \
             echo \"hugetune: 1 GB pages come from the kernel command line: none added\"; exit 0;; esac; ",
        );
    }
    s.push_str(&format!(
        "f={f}; [ -w \"$f\" ] || {{ echo \"hugetune: no {label} hugetlb pool on this kernel\" >&2; exit 0; }}; \
         b=$(cat \"$f\"); echo $((b + {pages})) > \"$f\"; a=$(cat \"$f\"); \
         echo $((a - b)) > \"$RUNTIME_DIRECTORY/{kb}kB\"; \
         [ $((a - b)) -ge {pages} ] || echo \"hugetune: the kernel gave $((a - b)) of the {pages} {label} pages asked for {}\" >&2",
        unit.name
    ));
    s
}

/// Takes back what `reserve_script` added (no more: pages others added since stay).
fn give_back_script(pool: Pool) -> String {
    let (kb, f) = (pool.page_kb(), nr_hugepages(pool));
    format!(
        "s=\"$RUNTIME_DIRECTORY/{kb}kB\"; [ -r \"$s\" ] || exit 0; f={f}; n=$(cat \"$s\"); c=$(cat \"$f\"); \
         t=$((c - n)); [ \"$t\" -ge 0 ] || t=0; echo \"$t\" > \"$f\"; rm -f \"$s\""
    )
}

/// A shell command line for ExecStart=/ExecStop=: `$` doubled (systemd would
/// substitute its own variables), `-` so that a failure fails nothing.
fn exec_sh(script: &str) -> String {
    format!("-/bin/sh -c '{}'", script.replace('$', "$$"))
}

fn pool_unit_text(unit: &Unit, about: &str, pages: &[(Pool, u64)]) -> String {
    let mut s = header(unit, about);
    let wanted: Vec<String> = pages
        .iter()
        .map(|&(p, n)| format!("{n} x {}", pool_label(p)))
        .collect();
    s.push_str(&format!(
        "# Adds the hugetlb pages {0}'s plan needs ({1}) to what is reserved, early at boot\n\
         # or when {0} starts; stopping it takes back what it added.\n\
         [Unit]\n\
         Description=hugetlb pages for {0} (hugetune)\n\
         DefaultDependencies=no\n\
         Conflicts=shutdown.target\n\
         After=local-fs.target\n\
         Before=sysinit.target shutdown.target {0}\n\
         ConditionPathIsDirectory=/sys/kernel/mm/hugepages\n\n\
         [Service]\n\
         Type=oneshot\n\
         RemainAfterExit=yes\n\
         # Holds how many pages were added, for ExecStop; removed when the unit stops.\n\
         RuntimeDirectory={2}\n",
        unit.name,
        wanted.join(" + "),
        unit.pool_stem()
    ));
    for &(p, n) in pages {
        s.push_str(&format!(
            "ExecStart={}\n",
            exec_sh(&reserve_script(unit, p, n))
        ));
    }
    for &(p, _) in pages {
        s.push_str(&format!("ExecStop={}\n", exec_sh(&give_back_script(p))));
    }
    s.push_str("\n[Install]\nWantedBy=sysinit.target\n");
    s
}

/// What is at one of the deployment's paths now.
#[derive(Debug, PartialEq)]
enum Existing {
    Nothing,
    Ours,
    /// Why it is not ours.
    Foreign(&'static str),
}

fn existing_file(root: &Root, unit: &Unit, abs: &Path) -> Result<Existing> {
    let at = root.at(abs);
    match std::fs::symlink_metadata(&at) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Existing::Nothing),
        Err(e) => Err(e).with_context(|| format!("reading {}", at.display())),
        Ok(m) if !m.is_file() => Ok(Existing::Foreign("not a regular file")),
        Ok(_) => {
            let bytes = std::fs::read(&at).with_context(|| format!("reading {}", at.display()))?;
            let first = String::from_utf8_lossy(bytes.split(|&b| b == b'\n').next().unwrap_or(&[]))
                .into_owned();
            Ok(if first == marker(unit) {
                Existing::Ours
            } else if first.starts_with(MARKER_PREFIX) {
                Existing::Foreign("written by hugetune for another unit")
            } else {
                Existing::Foreign("not written by hugetune")
            })
        }
    }
}

fn existing_link(root: &Root, abs: &Path, target: &Path) -> Result<Existing> {
    let at = root.at(abs);
    match std::fs::symlink_metadata(&at) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Existing::Nothing),
        Err(e) => Err(e).with_context(|| format!("reading {}", at.display())),
        Ok(m)
            if m.file_type().is_symlink() && std::fs::read_link(&at).is_ok_and(|t| t == target) =>
        {
            Ok(Existing::Ours)
        }
        Ok(_) => Ok(Existing::Foreign("not hugetune's link to its pool unit")),
    }
}

/// One change to the target system.
enum Step {
    File {
        path: PathBuf,
        bytes: Vec<u8>,
        mode: u32,
        /// Shown instead of the content (a binary file).
        what: Option<String>,
    },
    Link {
        path: PathBuf,
        target: PathBuf,
    },
    Remove {
        path: PathBuf,
    },
}

fn show_steps(root: &Root, steps: &[Step]) {
    for s in steps {
        match s {
            Step::File {
                path,
                bytes,
                mode,
                what,
            } => {
                println!("--- write {} (mode {mode:04o})", root.show(path));
                match what {
                    Some(w) => println!("({w})"),
                    None => print!("{}", String::from_utf8_lossy(bytes)),
                }
            }
            Step::Link { path, target } => {
                println!("--- link {} -> {}", root.show(path), target.display())
            }
            Step::Remove { path } => println!("--- remove {}", root.show(path)),
        }
    }
}

/// Replaces `path` in one step (a reader never sees half a file).
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().context("a file without a directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", needs_root(dir)))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.hugetune-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let r = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // The mode exactly, whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", needs_root(path)));
    }
    Ok(())
}

fn link_atomic(path: &Path, target: &Path) -> Result<()> {
    let dir = path.parent().context("a link without a directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", needs_root(dir)))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.hugetune-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .and_then(|_| std::fs::rename(&tmp, path))
        .with_context(|| format!("linking {}", needs_root(path)))
}

/// A path in an error, with the likely cause when it is not writable.
fn needs_root(p: &Path) -> String {
    let writable = |d: &Path| {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(d.as_os_str().as_bytes()).unwrap_or_default();
        // SAFETY: access reads a NUL-terminated path and has no other effect.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    };
    match p.ancestors().find(|a| a.exists()) {
        Some(a) if !writable(a) => format!(
            "{} ({} is not writable: run as root)",
            p.display(),
            a.display()
        ),
        _ => p.display().to_string(),
    }
}

fn apply(root: &Root, steps: &[Step]) -> Result<()> {
    for s in steps {
        match s {
            Step::File {
                path, bytes, mode, ..
            } => {
                write_atomic(&root.at(path), bytes, *mode)?;
                println!("wrote {}", root.show(path));
            }
            Step::Link { path, target } => {
                link_atomic(&root.at(path), target)?;
                println!("linked {} -> {}", root.show(path), target.display());
            }
            Step::Remove { path } => {
                match std::fs::remove_file(root.at(path)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e)
                            .with_context(|| format!("removing {}", needs_root(&root.at(path))))
                    }
                    _ => {}
                }
                println!("removed {}", root.show(path));
            }
        }
    }
    Ok(())
}

/// Removes the directories install may have created, when nothing else is in them.
fn remove_empty_dirs(root: &Root, p: &Paths) {
    let dirs = [
        p.dropin.parent(),
        p.plan.parent(),
        p.pool_link.parent(),
        Path::new(LIB_COPY).parent(),
    ];
    for d in dirs.into_iter().flatten() {
        // Fails (and is left) when not empty or not there.
        let _ = std::fs::remove_dir(root.at(d));
    }
}

/// systemd manages the system being changed (sd_booted(3)'s test).
fn systemd_here(root: &Root) -> bool {
    root.is_system() && Path::new("/run/systemd/system").is_dir()
}

fn systemctl(args: &[&str]) -> Result<()> {
    let o = Command::new("systemctl")
        .args(args)
        .output()
        .context("running systemctl")?;
    anyhow::ensure!(
        o.status.success(),
        "systemctl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    Ok(())
}

/// Runs (or, on a dry run, prints) systemctl commands where systemd manages the
/// system changed; elsewhere there is nothing to tell it (see `not_live_note`).
fn systemctl_steps(root: &Root, dry_run: bool, commands: &[&[&str]]) -> Result<()> {
    if !systemd_here(root) {
        return Ok(());
    }
    for c in commands {
        if dry_run {
            println!("would run: systemctl {}", c.join(" "));
        } else {
            systemctl(c)?;
            println!("ran: systemctl {}", c.join(" "));
        }
    }
    Ok(())
}

fn not_live_note(root: &Root) {
    if systemd_here(root) {
        return;
    }
    if root.is_system() {
        println!(
            "systemd is not running here: it reads the files when it starts \
             (where it runs: systemctl daemon-reload)"
        );
    } else {
        println!("--root is not this system: its systemd reads the files when it starts");
    }
}

fn refuse_foreign(root: &Root, path: &Path, e: &Existing) -> Result<()> {
    if let Existing::Foreign(why) = e {
        bail!(
            "{}: {why}: hugetune does not overwrite it (remove or rename it first)",
            root.show(path)
        );
    }
    Ok(())
}

fn install(ctx: &Ctx, a: InstallArgs) -> Result<i32> {
    let unit = Unit::parse(&a.target.unit)?;
    let root = Root::new(&a.target.root)?;
    let p = Paths::of(&unit);
    let svc = read_unit(&root, &unit, &p.dropin)?;
    let art = crate::artifacts::find()?;
    let chosen = match &a.plan {
        Some(f) => plan_from_file(&art.runtime_lib, f, &a)?,
        None => plan_from_db(ctx, &unit, &svc, &a)?,
    };
    let pool_pages: Vec<(Pool, u64)> = [(Pool::P2m, chosen.pages_2m), (Pool::P1g, chosen.pages_1g)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect();
    let (lib, copy_from) = service_library(&root, &art.runtime_lib)?;
    let env = service_env(&lib, &p.plan, &chosen.needs, &svc, &unit.summary_dir())?;

    // Nothing is written while any file in the way is somebody else's.
    let dropin_now = existing_file(&root, &unit, &p.dropin)?;
    let plan_now = existing_file(&root, &unit, &p.plan)?;
    let pool_now = existing_file(&root, &unit, &p.pool)?;
    let link_now = existing_link(&root, &p.pool_link, &p.pool)?;
    refuse_foreign(&root, &p.dropin, &dropin_now)?;
    refuse_foreign(&root, &p.plan, &plan_now)?;
    if !pool_pages.is_empty() {
        refuse_foreign(&root, &p.pool, &pool_now)?;
        refuse_foreign(&root, &p.pool_link, &link_now)?;
    }

    // Everything the drop-in names exists before it does: a restart in between
    // finds either the old deployment or the whole new one.
    let mut steps = Vec::new();
    if let Some(from) = &copy_from {
        let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
        if std::fs::read(root.at(&lib)).ok().as_ref() != Some(&bytes) {
            steps.push(Step::File {
                what: Some(format!(
                    "the runtime library, {} bytes, copied from {}",
                    bytes.len(),
                    from.display()
                )),
                path: lib.clone(),
                bytes,
                mode: 0o644,
            });
        }
    }
    steps.push(Step::File {
        path: p.plan.clone(),
        bytes: format!("{}{}", header(&unit, &chosen.about), chosen.body).into_bytes(),
        mode: 0o644,
        what: None,
    });
    if pool_pages.is_empty() {
        // An earlier install's pool is not needed any more.
        if link_now == Existing::Ours {
            steps.push(Step::Remove {
                path: p.pool_link.clone(),
            });
        }
        if pool_now == Existing::Ours {
            steps.push(Step::Remove {
                path: p.pool.clone(),
            });
        }
    } else {
        steps.push(Step::File {
            path: p.pool.clone(),
            bytes: pool_unit_text(&unit, &chosen.about, &pool_pages).into_bytes(),
            mode: 0o644,
            what: None,
        });
        steps.push(Step::Link {
            path: p.pool_link.clone(),
            target: p.pool.clone(),
        });
    }
    let pool_ref = (!pool_pages.is_empty()).then_some(p.pool_name.as_str());
    steps.push(Step::File {
        path: p.dropin.clone(),
        bytes: dropin_text(&unit, &chosen.about, &env, pool_ref).into_bytes(),
        mode: 0o644,
        what: None,
    });

    println!("{}: {}", unit.name, chosen.about);
    if !pool_pages.is_empty() {
        let wanted: Vec<String> = pool_pages
            .iter()
            .map(|&(pl, n)| format!("{n} {} pages", pool_label(pl)))
            .collect();
        println!(
            "reserved at boot by {}: {}",
            p.pool_name,
            wanted.join(" and ")
        );
    }
    if svc.environment_file {
        stages::note(format!(
            "{} reads an EnvironmentFile=: an LD_PRELOAD, GLIBC_TUNABLES or HUGETUNE_* set there \
             overrides the drop-in's",
            unit.name
        ));
    }
    if a.target.dry_run {
        show_steps(&root, &steps);
    } else {
        apply(&root, &steps)?;
    }
    systemctl_steps(&root, a.target.dry_run, &[&["daemon-reload"]])?;
    not_live_note(&root);
    println!(
        "next: systemctl restart {0}{1}, then: hugetune status -p $(systemctl show -p MainPID --value {0})",
        unit.name,
        pool_ref.map_or(String::new(), |p| format!(" (it starts {p} first)"))
    );
    if chosen.pages_1g > 0 {
        let in_use = machine::pool(Pool::P1g.page_kb()).map_or(0, |p| p.nr.saturating_sub(p.free));
        let (_, boot) = super::size::commands(Pool::P1g, chosen.pages_1g, in_use);
        for b in boot {
            println!("{b}");
        }
    }
    Ok(0)
}

/// The library copy goes with the last deployment that names it.
fn library_still_named(root: &Root, except: &Path) -> bool {
    let sys = Path::new("/etc/systemd/system");
    let Ok(rd) = std::fs::read_dir(root.at(sys)) else {
        return false;
    };
    rd.flatten()
        .map(|e| sys.join(e.file_name()).join("hugetune.conf"))
        .filter(|d| d != except)
        .filter_map(|d| std::fs::read_to_string(root.at(&d)).ok())
        .any(|t| t.starts_with(MARKER_PREFIX) && t.contains(LIB_COPY))
}

fn remove(a: Target) -> Result<i32> {
    let unit = Unit::parse(&a.unit)?;
    let root = Root::new(&a.root)?;
    let p = Paths::of(&unit);
    let mut steps = Vec::new();
    let mut foreign = Vec::new();
    let dropin_now = existing_file(&root, &unit, &p.dropin)?;
    let link_now = existing_link(&root, &p.pool_link, &p.pool)?;
    let pool_now = existing_file(&root, &unit, &p.pool)?;
    // The library copy: when this deployment names it and no other does.
    let names_copy = dropin_now == Existing::Ours
        && std::fs::read_to_string(root.at(&p.dropin)).is_ok_and(|t| t.contains(LIB_COPY));
    for (path, now) in [
        (&p.dropin, dropin_now),
        (&p.pool_link, link_now),
        (&p.pool, pool_now),
        (&p.plan, existing_file(&root, &unit, &p.plan)?),
    ] {
        match now {
            Existing::Ours => steps.push(Step::Remove { path: path.clone() }),
            Existing::Foreign(why) => {
                foreign.push(format!("{}: {why}: left in place", root.show(path)))
            }
            Existing::Nothing => {}
        }
    }
    if names_copy
        && root.at(Path::new(LIB_COPY)).is_file()
        && !library_still_named(&root, &p.dropin)
    {
        steps.push(Step::Remove {
            path: PathBuf::from(LIB_COPY),
        });
    }
    for f in &foreign {
        stages::note(f);
    }
    if steps.is_empty() {
        println!(
            "nothing to remove: no file of hugetune's for {} in {}",
            unit.name,
            root.0.display()
        );
        return Ok(if foreign.is_empty() { 0 } else { 1 });
    }
    // The pool unit gives its pages back while systemd still knows how.
    if removes(&steps, &p.pool) {
        systemctl_steps(&root, a.dry_run, &[&["stop", &p.pool_name]])?;
    }
    if a.dry_run {
        show_steps(&root, &steps);
    } else {
        apply(&root, &steps)?;
        remove_empty_dirs(&root, &p);
    }
    systemctl_steps(&root, a.dry_run, &[&["daemon-reload"]])?;
    not_live_note(&root);
    if removes(&steps, &p.dropin) {
        println!(
            "next: systemctl restart {}: it runs without the runtime library then",
            unit.name
        );
    }
    Ok(if foreign.is_empty() { 0 } else { 1 })
}

fn removes(steps: &[Step], what: &Path) -> bool {
    steps
        .iter()
        .any(|s| matches!(s, Step::Remove { path } if path == what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names() {
        let u = Unit::parse("redis").unwrap();
        assert_eq!(
            (u.name.as_str(), u.stem.as_str()),
            ("redis.service", "redis")
        );
        assert_eq!(Unit::parse("redis.service").unwrap().name, "redis.service");
        let i = Unit::parse("getty@tty1").unwrap();
        assert_eq!(i.template().as_deref(), Some("getty@.service"));
        assert_eq!(i.pool_stem(), "hugetune-pool-getty_tty1");
        for (bad, why) in [
            ("", "empty"),
            ("../x", "not a unit name"),
            ("a/b", "not a unit name"),
            ("a b", "cannot be in a unit name"),
            ("a$b", "cannot be in a unit name"),
            ("-x", "does not start"),
            ("x.socket", "socket unit"),
            ("getty@", "template"),
            ("getty@.service", "template"),
            ("a@b@c", "one '@'"),
        ] {
            let e = Unit::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(Unit::parse(&"x".repeat(250)).is_err());
    }

    #[test]
    fn settings_merge_as_systemd_merges_drop_ins() {
        let mut s = Service::default();
        s.read(
            "[Unit]\nExecStart=/not/this\n[Service]\nEnvironment=\"LD_PRELOAD=/a.so\" X=1\n\
             ExecStart=/usr/bin/prog \\\n  --flag\n# ExecStart=/commented\n",
        );
        assert_eq!(s.exec_start, vec!["/usr/bin/prog    --flag"]);
        assert_eq!(s.env("LD_PRELOAD"), Some("/a.so"));
        s.read("[Service]\nExecStart=\nExecStart=@/usr/bin/other other-name -v\nEnvironmentFile=/etc/x\n");
        assert_eq!(s.exec_start, vec!["@/usr/bin/other other-name -v"]);
        assert!(s.environment_file);
        let u = Unit::parse("app@one").unwrap();
        let argv = exec_argv(&u, &s.exec_start[0]).unwrap();
        assert_eq!(argv, vec![OsString::from("/usr/bin/other"), "-v".into()]);
        let argv = exec_argv(&u, "-+/usr/bin/app --name=%i --unit %n %%").unwrap();
        assert_eq!(
            argv,
            [
                "/usr/bin/app",
                "--name=one",
                "--unit",
                "app@one.service",
                "%"
            ]
            .map(OsString::from)
            .to_vec()
        );
        let e = exec_argv(&u, "${BIN} x").unwrap_err().to_string();
        assert!(e.contains("--plan"), "{e}");
    }

    #[test]
    fn plan_needs_read_from_the_text() {
        let n = plan_needs("hugetune-plan 1\nheap-large hugetlb-2m # x\npool hugetlb-2m 64\n");
        assert_eq!(
            n,
            PlanNeeds {
                hugetlb_2m: true,
                pool_2m: Some(64),
                ..Default::default()
            }
        );
        let n = plan_needs("hugetune-plan 1\nheap-large hugetlb-1g\nheap-small thp-2m\n");
        assert!(n.hugetlb_1g && !n.hugetlb_2m && n.tunable, "{n:?}");
        let n = plan_needs("hugetune-plan 1\nheap-large hugetlb-2m\nfork-safe thp\n");
        assert_eq!(n, PlanNeeds::default());
        let n = plan_needs("hugetune-plan 1\n# heap-large hugetlb-2m\nheap-small arena thp-2m\n");
        assert_eq!(n, PlanNeeds::default());
    }

    #[test]
    fn a_jvm_plan_puts_its_switch_after_the_services_own_options() {
        let n = plan_needs("hugetune-plan 1\njvm thp-2m\nfork-safe thp\n");
        assert_eq!(n.jvm, Some(Backing::Thp2m));
        assert!(!n.hugetlb_2m);
        let n = plan_needs("hugetune-plan 1\njvm hugetlb-2m\n");
        assert_eq!(n.jvm, Some(Backing::Hugetlb2m));
        assert!(n.hugetlb_2m, "-XX:+UseLargePages takes pool pages");
        let mut svc = Service::default();
        svc.read("[Service]\nEnvironment=\"JAVA_TOOL_OPTIONS=-Xss1m -Dx=1\"\nExecStart=/usr/bin/java -jar a.jar\n");
        let needs = plan_needs("hugetune-plan 1\njvm thp-2m\n");
        let e = service_env(Path::new("/l.so"), Path::new("/p"), &needs, &svc, "d").unwrap();
        let jto: Vec<&String> = e
            .iter()
            .filter(|(k, _)| k == "JAVA_TOOL_OPTIONS")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(jto, ["-Xss1m -Dx=1 -XX:+UseTransparentHugePages"]);
        // Without a plan line no JAVA_TOOL_OPTIONS is written.
        let e = service_env(
            Path::new("/l.so"),
            Path::new("/p"),
            &PlanNeeds::default(),
            &svc,
            "d",
        )
        .unwrap();
        assert!(e.iter().all(|(k, _)| k != "JAVA_TOOL_OPTIONS"), "{e:?}");
    }

    #[test]
    fn a_header_is_stripped_once() {
        let u = Unit::parse("a").unwrap();
        let t = format!("{}hugetune-plan 1\n", header(&u, "x\ny"));
        assert!(t.lines().nth(1).unwrap().starts_with("# From: x y"));
        assert_eq!(strip_header(&t), "hugetune-plan 1\n");
        assert_eq!(strip_header("hugetune-plan 1\n"), "hugetune-plan 1\n");
    }

    #[test]
    fn environment_is_quoted_for_systemd() {
        assert_eq!(
            env_assignment("A", "x \"y\" 50% \\"),
            r#""A=x \"y\" 50%% \\""#
        );
    }
}
