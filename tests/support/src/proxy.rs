//! A TCP proxy in front of the apiserver that a test can cut and restore, to simulate disconnects.

use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// A TCP proxy between a client and the apiserver that a test can cut and restore, to simulate
/// watch disconnects.
///
/// It forwards bytes only (TLS passes through: clients verify the apiserver's own certificate,
/// whose SAN `127.0.0.1` matches the proxy's address). It runs on its own thread and runtime, so
/// it works from any test, async or not, and [`cut`](Self::cut) returns only once every open
/// connection is closed. Connections are closed with a TCP reset, as a crashed peer or a dropped
/// route looks to the client. Dropping the proxy stops it.
#[derive(Debug)]
pub struct FaultProxy {
    config: kube::Config,
    addr: SocketAddr,
    control: mpsc::UnboundedSender<Control>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
enum Control {
    Cut(std_mpsc::Sender<()>),
    Restore(std_mpsc::Sender<()>),
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`; `config` is the admin config,
    /// which gets the proxy's URL.
    pub(crate) fn start(upstream: SocketAddr, mut config: kube::Config) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        config.cluster_url = format!("https://{addr}").parse()?;
        let (control, commands) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                if let Ok(runtime) = runtime {
                    runtime.block_on(async move {
                        if let Ok(listener) = TcpListener::from_std(listener) {
                            serve(listener, upstream, commands).await;
                        }
                    });
                }
            })
            .context("starting the fault proxy thread")?;
        Ok(Self { config, addr, control, thread: Some(thread) })
    }

    /// The admin config pointing at the proxy instead of the apiserver.
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// An admin client through the proxy, built in the caller's runtime.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("a kube::Client from the proxy config")
    }

    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Resets every open connection and refuses (resets) new ones until [`restore`](Self::restore).
    /// Returns when all connections are closed.
    pub fn cut(&self) {
        self.request(Control::Cut);
    }

    /// Lets new connections through again.
    pub fn restore(&self) {
        self.request(Control::Restore);
    }

    fn request(&self, command: fn(std_mpsc::Sender<()>) -> Control) {
        let (done, wait) = std_mpsc::channel();
        self.control.send(command(done)).expect("the fault proxy thread is running");
        wait.recv().expect("the fault proxy thread answers");
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Closing the channel ends `serve`, which drops every connection.
        let (closed, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.control, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(listener: TcpListener, upstream: SocketAddr, mut commands: mpsc::UnboundedReceiver<Control>) {
    let (generation, _) = watch::channel(0u64);
    let mut connections = JoinSet::new();
    let mut cut = false;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if cut {
                    let _ = client.set_zero_linger();
                    drop(client);
                } else {
                    connections.spawn(forward(client, upstream, generation.subscribe()));
                }
            }
            command = commands.recv() => match command {
                Some(Control::Cut(done)) => {
                    cut = true;
                    generation.send_modify(|g| *g += 1);
                    while connections.join_next().await.is_some() {}
                    let _ = done.send(());
                }
                Some(Control::Restore(done)) => {
                    cut = false;
                    let _ = done.send(());
                }
                None => break,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// Copies both ways until either side closes or the generation changes (a cut).
async fn forward(mut client: TcpStream, upstream: SocketAddr, mut generation: watch::Receiver<u64>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        let _ = client.set_zero_linger();
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = generation.changed() => {
            let _ = client.set_zero_linger();
            let _ = server.set_zero_linger();
        }
    }
}
