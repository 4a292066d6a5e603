//! Stand-ins for many nodes' wattsond on the link, for the controller's fan-out: every node at
//! [`FakeLink::ANSWERS`] opens the request with munged and answers that it is idle; every node
//! at [`FakeLink::HANGS`] takes the connection and never answers. Both listen on the same port,
//! so nodes are made answering or hung by their address alone.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::thread;

use wattson_link::{Munge, open_request, refusal, seal_reply};
use wattson_protocol::Reply;

/// Threads answering requests.
const WORKERS: usize = 16;

/// The fake nodes' port; they stop when the process ends.
pub struct FakeLink {
    /// The port every fake node listens on.
    pub port: u16,
}

impl FakeLink {
    /// The address of nodes that answer.
    pub const ANSWERS: &'static str = "127.0.0.1";
    /// The address of nodes that never answer.
    pub const HANGS: &'static str = "127.0.0.2";

    /// Starts the fake nodes, opening and sealing with the munged at `munge_socket`.
    pub fn start(munge_socket: &Path) -> FakeLink {
        let answers = TcpListener::bind((Self::ANSWERS, 0)).expect("bind the answering nodes");
        let port = answers.local_addr().unwrap().port();
        let hangs = TcpListener::bind((Self::HANGS, port)).expect("bind the hung nodes");
        let munge = Munge::new(Some(munge_socket)).expect("munged for the fake nodes");
        for _ in 0..WORKERS {
            let (listener, munge) = (answers.try_clone().unwrap(), munge.clone());
            thread::spawn(move || {
                while let Ok((stream, _)) = listener.accept() {
                    answer(stream, &munge);
                }
            });
        }
        // Held connections go to one owner that keeps them open until the process ends.
        let (held, keep) = mpsc::channel::<TcpStream>();
        thread::spawn(move || keep.iter().collect::<Vec<_>>());
        thread::spawn(move || {
            while let Ok((stream, _)) = hangs.accept() {
                let _ = held.send(stream);
            }
        });
        FakeLink { port }
    }
}

/// Reads one request line and answers it as an idle node would.
fn answer(stream: TcpStream, munge: &Munge) {
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let answer = match open_request(munge, &line) {
        Ok((uid, _)) => seal_reply(munge, &line, uid, &Ok(Reply::Idle { node: "fake".into() })),
        Err(e) => Some(refusal(&e)),
    };
    if let Some(answer) = answer {
        let _ = (&stream).write_all(&answer);
    }
}
