//! The container image `make image` writes (deploy/image/build.sh), and the Dockerfile's final
//! stage it must agree with.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::{plugin_dir, run_ok};

/// The repository root.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Whether this process runs as root (the owner of /proc/self is the effective user).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// What `make image` wrote into `KUBEWASM_IMAGE_DIR` (default: `<target>/image`).
pub struct Image {
    /// The OCI layout directory.
    pub layout: PathBuf,
    /// The oci-archive (which is also a docker-archive).
    pub archive: PathBuf,
    /// The layout's tag: the workspace version.
    pub tag: String,
}

impl Image {
    /// The built image; `None` (after saying why on stderr) when it is missing or `needs_root`
    /// and this is not root, outside CI. In CI (`CI=true`) both are failures, never a skip.
    pub fn built(needs_root: bool) -> Option<Self> {
        let dir = std::env::var_os("KUBEWASM_IMAGE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| plugin_dir().join("../../image"));
        let tag = env!("CARGO_PKG_VERSION").to_owned();
        let image = Self { layout: dir.join("oci"), archive: dir.join(format!("kubewasm-{tag}.oci.tar")), tag };
        let problem = if !image.layout.join("index.json").is_file() || !image.archive.is_file() {
            format!("no image in {} (build it with `make image`; `make test` does)", dir.display())
        } else if needs_root && !is_root() {
            "this test unpacks the image with its owners and runs it in a chroot, which needs root".to_owned()
        } else {
            return Some(image);
        };
        assert!(!in_ci(), "CI=true and {problem}");
        let test = std::thread::current().name().unwrap_or("this test").to_owned();
        // Past the test harness's capture, so the skip shows in `cargo test`'s output.
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {problem}");
        None
    }

    /// The image configuration (index.json → the manifest tagged [`Image::tag`] → config).
    pub fn config(&self) -> serde_json::Value {
        config_of(&self.layout, &self.tag)
    }

    /// The image unpacked by umoci with its owners (as root): `<dir>/rootfs` and the runtime
    /// spec umoci derives from the config.
    pub fn unpack(&self) -> tempfile::TempDir {
        unpack(&self.layout, &self.tag)
    }
}

/// The configuration of OCI layout `layout`'s image `tag` (index.json → manifest → config).
pub fn config_of(layout: &Path, tag: &str) -> serde_json::Value {
    let blob = |descriptor: &serde_json::Value| -> serde_json::Value {
        let digest = descriptor["digest"].as_str().expect("a descriptor with a digest");
        let path = layout.join("blobs").join(digest.replace(':', "/"));
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).expect("index.json is JSON");
    let manifests = index["manifests"].as_array().expect("index.json lists manifests");
    let entry = manifests
        .iter()
        .find(|m| {
            m.pointer("/annotations/org.opencontainers.image.ref.name").and_then(serde_json::Value::as_str) == Some(tag)
        })
        .unwrap_or_else(|| panic!("no manifest tagged {tag} in {index}"));
    blob(&blob(entry)["config"])
}

/// OCI layout `layout`'s image `tag`, unpacked by umoci with its owners (as root) into
/// `<dir>/bundle/rootfs`.
pub fn unpack(layout: &Path, tag: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut unpack = Command::new("umoci");
    unpack.arg("unpack").arg("--image").arg(format!("{}:{tag}", layout.display())).arg(dir.path().join("bundle"));
    run_ok(unpack);
    dir
}

/// The Dockerfile's text from its last `FROM` on.
pub fn final_stage_text() -> String {
    let text = std::fs::read_to_string(repo_dir().join("Dockerfile")).unwrap();
    let start = text.rfind("\nFROM ").expect("a FROM in the Dockerfile") + 1;
    text[start..].to_owned()
}

/// One instruction `COPY [--from=builder] [--chown=UID:GID] SRC DEST` of the final stage.
#[derive(Debug)]
pub struct Copy {
    /// `--chown`, else root.
    pub owner: (u32, u32),
    /// The path in the builder stage.
    pub src: String,
    /// The path in the image.
    pub dest: String,
}

/// The Dockerfile's final stage, as `docker build` would apply it.
#[derive(Debug, Default)]
pub struct FinalStage {
    /// `ARG NAME=default`.
    pub args: BTreeMap<String, String>,
    /// The `COPY` instructions, in order.
    pub copies: Vec<Copy>,
    /// `USER`.
    pub user: String,
    /// `WORKDIR`.
    pub workdir: String,
    /// `ENV NAME=value`, in order.
    pub env: Vec<String>,
    /// `EXPOSE`, as `<port>/tcp`.
    pub exposed: Vec<String>,
    /// `LABEL name=value`, `${ARG}`s not yet replaced.
    pub labels: BTreeMap<String, String>,
    /// `ENTRYPOINT` (exec form).
    pub entrypoint: Vec<String>,
}

impl FinalStage {
    /// The repository's Dockerfile: the lines after its last `FROM`. Panics on an instruction
    /// it does not know, as deploy/image/build.sh refuses one.
    pub fn read() -> Self {
        let text = std::fs::read_to_string(repo_dir().join("Dockerfile")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).expect("a FROM in the Dockerfile");
        let mut stage = Self::default();
        for line in lines[last_from + 1..].iter().map(|l| l.trim()).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
            let pair = || rest.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).expect("NAME=value");
            match instruction {
                "ARG" => {
                    let (name, default) = pair();
                    stage.args.insert(name, default);
                }
                "COPY" => stage.copies.push(copy(rest)),
                "USER" => stage.user = rest.to_owned(),
                "WORKDIR" => stage.workdir = rest.to_owned(),
                "ENV" => stage.env.push(rest.to_owned()),
                "EXPOSE" => stage.exposed.push(format!("{rest}/tcp")),
                "LABEL" => {
                    let (name, value) = pair();
                    stage.labels.insert(name, value);
                }
                "ENTRYPOINT" => stage.entrypoint = serde_json::from_str(rest).expect("ENTRYPOINT in exec form"),
                other => panic!("the final stage has {other}, which deploy/image/build.sh does not apply"),
            }
        }
        stage
    }
}

fn copy(rest: &str) -> Copy {
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"--from=builder"), "COPY {rest}");
    words.remove(0);
    let mut owner = (0, 0);
    if let Some(chown) = words[0].strip_prefix("--chown=") {
        let (uid, gid) = chown.split_once(':').expect("--chown=UID:GID");
        owner = (uid.parse().unwrap(), gid.parse().unwrap());
        words.remove(0);
    }
    let [src, dest] = words[..] else { panic!("COPY {rest}: one source, one destination") };
    Copy { owner, src: src.to_owned(), dest: dest.to_owned() }
}

/// A file system entry: `d`/`f`/`l`, permission bits, owner, and a file's SHA-256.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    kind: char,
    mode: u32,
    uid: u32,
    gid: u32,
    sha256: Option<String>,
}

fn entry(path: &Path, owner: Option<(u32, u32)>) -> Entry {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let kind = if meta.is_dir() {
        'd'
    } else if meta.is_symlink() {
        'l'
    } else {
        'f'
    };
    let sha256 = meta.is_file().then(|| hex::encode(Sha256::digest(std::fs::read(path).unwrap())));
    let (uid, gid) = owner.unwrap_or((meta.uid(), meta.gid()));
    Entry { kind, mode: meta.permissions().mode() & 0o7777, uid, gid, sha256 }
}

/// Every entry under `root` by its path in the image (`/etc/passwd`), owners as on disk, or
/// `owner` for all when given; `into` (`/` or a directory) is the path `root` stands for.
pub fn tree(root: &Path, into: &str, owner: Option<(u32, u32)>, out: &mut BTreeMap<String, Entry>) {
    for child in std::fs::read_dir(root).unwrap() {
        let child = child.unwrap();
        let name = format!("{}/{}", into.trim_end_matches('/'), child.file_name().to_string_lossy());
        let e = entry(&child.path(), owner);
        let is_dir = e.kind == 'd';
        out.insert(name.clone(), e);
        if is_dir {
            tree(&child.path(), &name, owner, out);
        }
    }
}

/// What `docker build` makes of the final stage's COPYs when the builder stage's `/image` is
/// `built`: each source directory's contents under its destination, owned by root or `--chown`,
/// the destination directory created with the source's mode.
pub fn expected_tree(stage: &FinalStage, built: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for copy in &stage.copies {
        let src = built.join(copy.src.strip_prefix("/image/").expect("COPY from the builder's /image"));
        if !copy.dest.trim_end_matches('/').is_empty() {
            out.insert(copy.dest.trim_end_matches('/').to_owned(), entry(&src, Some(copy.owner)));
        }
        tree(&src, &copy.dest, Some(copy.owner), &mut out);
    }
    out
}

/// Runs deploy/image/rootfs.sh into `out` with the image's own binary, the built example
/// plugins, the built engines and this machine's CA bundle: the builder stage's `/image`.
pub fn rootfs_sh(out: &Path, binary: &Path) {
    let mut script = Command::new("bash");
    script.arg(repo_dir().join("deploy/image/rootfs.sh")).arg(out).arg(binary).arg(plugin_dir());
    script.arg("/etc/ssl/certs/ca-certificates.crt").arg(super::project::engine_dir());
    run_ok(script);
}

impl Entry {
    /// A regular file owned by `uid`.
    pub fn is_file_of(&self, uid: u32) -> bool {
        self.kind == 'f' && self.uid == uid
    }
}
