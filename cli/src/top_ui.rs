//! The terminal UI of `monarch top` (ratatui): the tree of `top_rows`,
//! refreshed as snapshots arrive, a selection, and the keys.

use std::io::Stdout;
use std::time::Duration;

use monarch_core::introspect::Introspection;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::{Frame, Terminal};

use crate::top_rows::{self, Item, HEADER};
use crate::top_session::{self as top, Session};

const KEYS: &str = "up/down select  e last error  s stacks  x stop mesh  r refresh  q quit";

/// A text window over the tree (an error, stacks, a question).
struct Popup {
    title: String,
    text: String,
    /// The mesh a "y" stops (a confirmation).
    confirm_stop: Option<String>,
    scroll: u16,
}

struct App {
    snap: Option<Introspection>,
    rows: Vec<top_rows::Row>,
    selected: usize,
    status: String,
    popup: Option<Popup>,
    refreshed: Option<std::time::SystemTime>,
}

impl App {
    fn item(&self) -> Option<Item> {
        self.rows.get(self.selected).map(|r| r.item)
    }

    fn update(&mut self, snap: Introspection) {
        let keep = self.item();
        self.rows = top_rows::rows(&snap);
        if let Some(k) = keep {
            if let Some(i) = self.rows.iter().position(|r| r.item == k) {
                self.selected = i;
            }
        }
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
        self.snap = Some(snap);
        self.refreshed = Some(std::time::SystemTime::now());
    }
}

fn state_color(state: &str) -> Color {
    if state.starts_with("ready") && !state.contains("no answer") {
        Color::Green
    } else if state.starts_with("failed") {
        Color::Red
    } else if state.starts_with("starting") || state.contains("no answer") {
        Color::Yellow
    } else {
        Color::DarkGray
    }
}

fn draw(f: &mut Frame, app: &App, session: &Session, table: &mut TableState) {
    let [top, body, meshes, status, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let when = app
        .refreshed
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| {
            let s = d.as_secs() % 86_400;
            format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
        })
        .unwrap_or_else(|| "waiting for the first snapshot".into());
    f.render_widget(
        Paragraph::new(format!("monarch top - {}  ({when})", session.addr))
            .style(Style::default().add_modifier(Modifier::BOLD)),
        top,
    );
    let rows = app.rows.iter().map(|r| {
        let mut cells = vec![r.name.clone(), r.state.clone()];
        cells.extend(r.counters.iter().cloned());
        let style = match r.item {
            Item::Host => Style::default().add_modifier(Modifier::BOLD),
            _ => Style::default(),
        };
        Row::new(cells).style(style).style(style.fg(match r.item {
            Item::Host => Color::Cyan,
            _ => state_color(&r.state),
        }))
    });
    let widths = [
        Constraint::Min(24),
        Constraint::Length(18),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
    ];
    let t = Table::new(rows, widths)
        .header(Row::new(HEADER).style(Style::default().add_modifier(Modifier::REVERSED)))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
    table.select(Some(app.selected));
    f.render_stateful_widget(t, body, table);
    let mesh_text = app
        .snap
        .as_ref()
        .map(top_rows::mesh_line)
        .unwrap_or_default();
    f.render_widget(Paragraph::new(mesh_text), meshes);
    f.render_widget(
        Paragraph::new(app.status.clone()).style(Style::default().fg(Color::Yellow)),
        status,
    );
    f.render_widget(
        Paragraph::new(KEYS).style(Style::default().add_modifier(Modifier::DIM)),
        keys,
    );
    if let Some(p) = &app.popup {
        let area = centered(f.area(), 90, 70);
        f.render_widget(Clear, area);
        let hint = if p.confirm_stop.is_some() {
            " y: stop  any other key: cancel "
        } else {
            " up/down scroll  any other key: close "
        };
        let lines: Vec<Line> = p.text.lines().map(|l| Line::raw(l.to_string())).collect();
        f.render_widget(
            Paragraph::new(lines)
                .block(Block::bordered().title(p.title.clone()).title_bottom(hint))
                .wrap(Wrap { trim: false })
                .scroll((p.scroll, 0)),
            area,
        );
    }
}

fn centered(r: Rect, pct_x: u16, pct_y: u16) -> Rect {
    let w = r.width * pct_x / 100;
    let h = r.height * pct_y / 100;
    Rect::new(r.x + (r.width - w) / 2, r.y + (r.height - h) / 2, w, h)
}

/// Restores the terminal however `run` ends.
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = disable_raw_mode();
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen);
    }
}

pub fn run(session: &Session, interval: Duration) -> Result<(), String> {
    enable_raw_mode().map_err(|e| format!("this needs a terminal: {e}"))?;
    let _guard = TerminalGuard;
    execute!(std::io::stdout(), EnterAlternateScreen).map_err(|e| e.to_string())?;
    let mut term: Terminal<CrosstermBackend<Stdout>> =
        Terminal::new(CrosstermBackend::new(std::io::stdout())).map_err(|e| e.to_string())?;
    let (snaps, poke) = session.snapshots(interval);
    let mut app = App {
        snap: None,
        rows: Vec::new(),
        selected: 0,
        status: String::new(),
        popup: None,
        refreshed: None,
    };
    let mut table = TableState::default();
    loop {
        while let Ok(r) = snaps.try_recv() {
            match r {
                Ok(s) => {
                    app.update(s);
                    if app.status.starts_with("controller unreachable") {
                        app.status.clear();
                    }
                }
                Err(e) => app.status = format!("controller unreachable: {e}"),
            }
        }
        term.draw(|f| draw(f, &app, session, &mut table))
            .map_err(|e| e.to_string())?;
        if !event::poll(Duration::from_millis(100)).map_err(|e| e.to_string())? {
            continue;
        }
        let Event::Key(k) = event::read().map_err(|e| e.to_string())? else {
            continue;
        };
        if k.kind != KeyEventKind::Press {
            continue;
        }
        if let Some(p) = &mut app.popup {
            match k.code {
                KeyCode::Char('y') if p.confirm_stop.is_some() => {
                    let name = p.confirm_stop.take().unwrap_or_default();
                    app.popup = None;
                    app.status = match session.stop_mesh(&name) {
                        Ok(()) => format!("stopped mesh {name}"),
                        Err(e) => format!("cannot stop mesh {name}: {e}"),
                    };
                    let _ = poke.send(());
                }
                KeyCode::Down if p.confirm_stop.is_none() => p.scroll = p.scroll.saturating_add(1),
                KeyCode::Up if p.confirm_stop.is_none() => p.scroll = p.scroll.saturating_sub(1),
                _ => app.popup = None,
            }
            continue;
        }
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
            KeyCode::Down | KeyCode::Char('j') => {
                app.selected = (app.selected + 1).min(app.rows.len().saturating_sub(1))
            }
            KeyCode::Up | KeyCode::Char('k') => app.selected = app.selected.saturating_sub(1),
            KeyCode::Char('r') => {
                let _ = poke.send(());
            }
            KeyCode::Char('e') => {
                if let (Some(s), Some(i)) = (&app.snap, app.item()) {
                    app.popup = Some(Popup {
                        title: " last error ".into(),
                        text: top::error_of(s, i),
                        confirm_stop: None,
                        scroll: 0,
                    });
                }
            }
            KeyCode::Char('s') => {
                if let (Some(s), Some(i)) = (&app.snap, app.item()) {
                    app.status = "dumping stacks...".into();
                    term.draw(|f| draw(f, &app, session, &mut table))
                        .map_err(|e| e.to_string())?;
                    match top::dump_stacks(s, i) {
                        Ok(text) => {
                            app.status.clear();
                            app.popup = Some(Popup {
                                title: " stacks ".into(),
                                text,
                                confirm_stop: None,
                                scroll: 0,
                            });
                        }
                        Err(e) => app.status = format!("stacks: {e}"),
                    }
                }
            }
            KeyCode::Char('x') => {
                if let (Some(s), Some(i)) = (&app.snap, app.item()) {
                    match top::mesh_of(s, i) {
                        Some(name) => {
                            app.popup = Some(Popup {
                                title: " stop mesh ".into(),
                                text: format!("Stop mesh {name}?"),
                                confirm_stop: Some(name),
                                scroll: 0,
                            })
                        }
                        None => app.status = "select a proc or an actor of a mesh".into(),
                    }
                }
            }
            _ => {}
        }
    }
}
