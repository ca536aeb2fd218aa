// tcp_store_session.cpp: Session, one connection of TcpStoreServer, on the io thread.
// Bytes become requests (parse_request), requests replies (handle_request); what a
// request released in other connections is delivered through ServerState. Idle
// connections own no buffer: reads land in the server's shared chunk and only an
// incomplete request is copied aside. Sessions never time out: c10d clients keep idle
// connections for hours, and a 1.13 client's callback connection never sends a byte.
#include "store/tcp_store_session.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/sys_error.h"
#include "store/core/handler.h"

namespace ddprun::store::server_detail {

Session::~Session() {
  if (!closed_) server_.session_closed(id_);  // fd_ closes after this
  account(0);
}

// A WAIT or BARRIER of this client completed: one byte per registration, so bounded.
void Session::push_release() {
  encode_release(out_);
  do_write();
  account(unsent());
}

// A key this (legacy) client watches changed. A watcher that lets these pile up
// unread is closed rather than buffered without limit.
void Session::push_notification(const KvState::Notification& n) {
  encode_notification(n, out_);
  do_write();
  account(unsent());
  if (unsent() > kMaxPushBacklogBytes ||
      (unsent() > 0 && server_.output_bytes > server_.options.max_output_bytes)) {
    close("it does not read its WATCH_KEY notifications (" + std::to_string(unsent()) +
          " bytes unsent)");
  }
}

// Deferred for output budget (ServerState::defer_output), now let go: try again.
void Session::resume_output() {
  if (closed_ || !deferred_) return;
  deferred_ = false;
  resume();
}

// Closes the connection (idempotent). A non-empty `reason` is logged as a warning.
void Session::close(std::string_view reason) {
  if (closed_) return;
  closed_ = true;
  if (!reason.empty()) server_.log_rejected(peer_, reason);
  fd_.reset();  // also leaves the epoll set
  server_.session_closed(id_);
  stream_.reset();  // lets go of the values it still held
  out_.clear();
  out_.shrink_to_fit();
  out_pos_ = 0;
  account(0);
}

void Session::on_event(std::uint32_t events) {
  if (closed_) return;
  if ((events & EPOLLOUT) != 0) {
    writable_ = true;
    on_writable();
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    readable_ = true;
    // No edge follows a FIN or error that is already here: read until recv says so.
    if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) peer_done_ = true;
    do_read();
  }
}

void Session::read_more() {
  read_again_ = false;
  do_read();
}

// Reads one chunk into the server's shared buffer (idle connections own none) and
// handles it. A full chunk may have more behind it: read next turn, after the other
// connections' input (arrival order across connections). A short read drained the
// socket: the next data brings a new edge (unless the peer is done: then read to EOF).
void Session::do_read() {
  if (!readable_ || closed_ || paused_) return;
  std::string& chunk = server_.read_buf;
  ssize_t n = ::recv(fd_.get(), chunk.data(), chunk.size(), 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      readable_ = false;
      return;
    }
    if (errno == EINTR) return do_read();
    if (errno == ECONNRESET) return close("");
    return close(errno_text(errno));
  }
  if (n == 0) return close("");
  const auto got = static_cast<std::size_t>(n);
  ServerState::bump(server_.stat_bytes_in, got);
  if (got < chunk.size() && !peer_done_) readable_ = false;
  if (in_.empty()) {
    std::string_view data(chunk.data(), got);
    std::size_t used = consume(data);
    if (closed_) return;
    in_.assign(data.substr(used));
  } else {
    in_.append(chunk.data(), got);
    std::size_t used = consume(in_);
    if (closed_) return;
    in_.erase(0, used);
  }
  after_consume();
}

void Session::after_consume() {
  if (!paused_ && in_.size() > server_.options.limits.max_request_bytes) {
    return close("request larger than " + std::to_string(server_.options.limits.max_request_bytes) +
                 " bytes");
  }
  if (readable_ && !paused_ && !read_again_) {
    read_again_ = true;
    server_.read_again.push_back(id_);
  }
}

// Handles every complete request at the front of `data`, in order, until this
// connection's or the server's output budget is used up. Returns the bytes used.
std::size_t Session::consume(std::string_view data) {
  std::size_t pos = 0;
  const ServerOptions& opts = server_.options;
  while (!closed_) {
    if (unsent() >= opts.max_connection_output_bytes) {
      do_write();
      account(unsent());
      // Still over only while the socket is full: EPOLLOUT resumes reading.
      if (unsent() >= opts.max_connection_output_bytes) {
        paused_ = true;
        break;
      }
    }
    std::string_view rest = data.substr(pos);
    if (!dialect_) {
      std::string error;
      DetectResult d = detect_dialect(rest, opts.limits, error);
      if (d == DetectResult::kNeedMore) break;
      if (d == DetectResult::kBad) {
        close(error);
        break;
      }
      dialect_ = d == DetectResult::kModern ? Dialect::kModern : Dialect::kLegacy;
    }
    ParseResult parsed = parse_request(rest, *dialect_, opts.limits, req_);
    if (parsed.status == ParseStatus::kNeedMore) break;
    if (parsed.status == ParseStatus::kBad) {
      close(parsed.error);
      break;
    }
    const std::size_t need = reply_size(server_.kv, req_);
    if (need > opts.max_reply_bytes) {
      close(std::string(op_name(req_.op)) + ": reply of " + std::to_string(need) +
            " bytes exceeds the limit of " + std::to_string(opts.max_reply_bytes) +
            " bytes (--max-reply-bytes)");
      break;
    }
    // A large GET or MULTI_GET is sent in pieces, one built each time the socket has
    // taken the last: only a piece counts against the budget.
    const bool stream =
        need > kStreamPieceBytes && (req_.op == Op::kGet || req_.op == Op::kMultiGet);
    if (!server_.output_admits(unsent(), stream ? kStreamPieceBytes : need)) {
      // Not consumed: parsed again when the budget lets this session go on.
      paused_ = deferred_ = true;
      server_.defer_output(shared_from_this(), stream ? kStreamPieceBytes : need);
      break;
    }
    pos += parsed.consumed;
    ServerState::bump(server_.stat_requests, 1);
    if (stream) {
      // Requests behind it wait until it is all out (paused_, resumed by on_write).
      stream_.emplace(server_.kv, req_);
      paused_ = true;
      break;
    }
    KvState::Effects& fx = server_.fx;
    fx.clear();
    HandleResult result = handle_request(server_.kv, id_, req_, out_, fx);
    account(unsent());
    server_.deliver(fx);
    server_.note_freed();
    if (result.kind == HandleResult::Kind::kClose) {
      close(result.error);
      break;
    }
  }
  if (stream_) {
    fill_from_stream();
  } else {
    do_write();
  }
  account(unsent());
  return pos;
}

// Tops the output up with the next piece of the reply being streamed and writes it.
// When the socket takes it all at once, the next piece comes in a later turn of the
// event loop (posted), so that one fast reader cannot hold the loop.
void Session::fill_from_stream() {
  if (closed_ || !stream_) return;
  auto top_up = [this] {
    if (unsent() < kStreamPieceBytes) stream_->next(out_, kStreamPieceBytes - unsent());
    if (stream_->done()) stream_.reset();
  };
  top_up();
  do_write();
  // A full socket: hold a whole piece, so that what a stalled reader costs the server
  // is what the output budget counts for it.
  if (!writable_ && stream_) top_up();
  account(unsent());
  // A full socket continues on EPOLLOUT; otherwise go on in a later turn (never from
  // here, where a caller may be in the middle of consume()).
  if (writable_ && !stream_posted_) {
    stream_posted_ = true;
    server_.post([self = shared_from_this()] {
      self->stream_posted_ = false;
      if (self->stream_) {
        self->fill_from_stream();
      } else {
        self->finish_stream();
      }
    });
  }
}

// The streamed reply is all written: requests held back behind it go on.
void Session::finish_stream() {
  if (closed_) return;
  if (paused_ && !deferred_ && unsent() < server_.options.max_connection_output_bytes) {
    resume();
  }
}

// Takes up requests held back while paused.
void Session::resume() {
  paused_ = false;
  std::size_t used = consume(in_);
  if (closed_) return;
  in_.erase(0, used);
  after_consume();
}

// Tells the server this session now has `now` bytes unsent.
void Session::account(std::size_t now) {
  if (now == accounted_) return;
  const auto delta = static_cast<std::ptrdiff_t>(now) - static_cast<std::ptrdiff_t>(accounted_);
  accounted_ = now;
  server_.output_changed(delta);
}

void Session::do_write() {
  // Most replies are a few bytes and the socket has room for them. An error is left
  // for the next event to report: never close here, where a caller may be delivering
  // to several sessions.
  while (writable_ && !closed_ && unsent() > 0) {
    ssize_t n = ::send(fd_.get(), out_.data() + out_pos_, unsent(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        writable_ = false;
      } else {
        // Reading will see the reset or EOF and close; stop writing until then.
        writable_ = false;
        server_.post([self = shared_from_this()] {
          if (!self->closed_) self->close("");
        });
      }
      break;
    }
    out_pos_ += static_cast<std::size_t>(n);
    ServerState::bump(server_.stat_bytes_out, static_cast<std::size_t>(n));
  }
  if (unsent() == 0) {
    out_.clear();
    out_pos_ = 0;
    if (out_.capacity() > kReadChunk) out_.shrink_to_fit();  // a big reply is gone
  } else if (out_pos_ > kReadChunk && out_pos_ * 2 > out_.size()) {
    out_.erase(0, out_pos_);  // keep appends from growing a mostly-sent buffer
    out_pos_ = 0;
  }
}

// The socket has room again: send what waits, then go on with what waited for it.
void Session::on_writable() {
  if (closed_) return;
  if (stream_) return fill_from_stream();
  do_write();
  account(unsent());
  finish_stream();
}

}  // namespace ddprun::store::server_detail
